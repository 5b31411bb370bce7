"""Which files a spec sent to the service may name (`data_roots`), without a server."""

from __future__ import annotations

import pytest

from tuner.app.service.access.data_roots import OutsideDataRoots, check_path, spec_paths


def test_only_paths_under_a_root_pass(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    (root / "corpus.txt").write_text("x")
    check_path("data.corpus", str(root / "corpus.txt"), [root], resolve=True)
    check_path("data.corpus", str(root / "not-yet"), [root], resolve=True)  # says nothing
    for bad in ("/etc/passwd", str(root / ".." / "elsewhere"), str(tmp_path / "data2" / "x")):
        with pytest.raises(OutsideDataRoots, match="data root") as e:
            check_path("data.corpus", bad, [root], resolve=True)
        assert e.value.field == "data.corpus"
    with pytest.raises(OutsideDataRoots, match="absolute path"):
        check_path("model.full", "rel/config.json", [root], resolve=True)


def test_a_link_out_of_a_root_is_followed_where_the_files_are_read(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    (root / "escape").symlink_to("/etc/passwd")
    with pytest.raises(OutsideDataRoots):
        check_path("data.corpus", str(root / "escape"), [root], resolve=True)
    # on a cluster the path is judged as written (the nodes hold the files)
    check_path("data.corpus", str(root / "escape"), [root], resolve=False)


def test_every_file_a_spec_names_is_found():
    table = {"data": {"corpus": "0.3 /d/a 0.7 /d/b", "tokenizer": "/d/tok.json"},
             "model": {"full": "/d/config.json"},
             "full_run": {"target": "deepseek-v3-671b"}}
    assert list(spec_paths(table)) == [("data.corpus", "/d/a"), ("data.corpus", "/d/b"),
                                       ("data.tokenizer", "/d/tok.json"),
                                       ("model.full", "/d/config.json")]
    assert list(spec_paths({"data": {"corpus": "stdlib", "tokenizer": "bpe:512"},
                            "full_run": {"target": "/x/config_671B.json"}})) == [
        ("full_run.target", "/x/config_671B.json")]


def _refusal(value: str, root) -> str:
    with pytest.raises(OutsideDataRoots) as e:
        check_path("data.corpus", value, [root], resolve=True)
    return str(e.value)


def test_a_folder_entry_linked_out_of_the_roots_is_refused(tmp_path):
    root, outside = tmp_path / "data", tmp_path / "outside"
    (root / "dir" / "deep").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (root / "dir" / "a.txt").write_text("fine")
    check_path("data.corpus", str(root / "dir"), [root], resolve=True)
    (root / "dir" / "deep" / "zz_link.txt").symlink_to(outside / "secret.txt")
    assert "data root" in _refusal(str(root / "dir"), root)
    (root / "dir" / "deep" / "zz_link.txt").unlink()
    (root / "dir" / "deep" / "sub").symlink_to(outside)  # a linked folder, too
    assert "data root" in _refusal(str(root / "dir"), root)


def test_a_megatron_prefix_linked_out_says_the_same_whether_its_target_exists(tmp_path):
    root, outside = tmp_path / "data", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "real.bin").write_bytes(b"\0" * 64)
    (outside / "real.idx").write_bytes(b"\0" * 64)
    (root / "x.bin").symlink_to(outside / "real.bin")
    (root / "x.idx").symlink_to(outside / "real.idx")
    (root / "y.bin").symlink_to(outside / "nothing.bin")
    (root / "y.idx").symlink_to(outside / "nothing.idx")
    there = _refusal(str(root / "x"), root)
    missing = _refusal(str(root / "y"), root)
    assert there.replace("'x'", "'y'").replace("/x'", "/y'") == missing
    assert _refusal(str(root / "x.idx"), root)  # naming either file: the other is judged too


@pytest.mark.skipif(not hasattr(__import__("os"), "link"), reason="no hard links here")
def test_a_file_with_another_hard_link_is_refused(tmp_path):
    import os

    root, outside = tmp_path / "data", tmp_path / "outside"
    (root / "dir").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    os.link(outside / "secret.txt", root / "dir" / "h.txt")
    assert "data root" in _refusal(str(root / "dir"), root)
    assert "data root" in _refusal(str(root / "dir" / "h.txt"), root)
