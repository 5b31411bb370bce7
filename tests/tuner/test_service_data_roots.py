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
