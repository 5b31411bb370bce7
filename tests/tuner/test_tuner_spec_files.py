"""The files a spec names (corpus, model config, space file) and the token budget are checked at
validation, read from the spec's folder whatever the current one, and stored absolute."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainers import preset
from tuner.app.cli import main
from tuner.study.specs.spec import SpecError, load_spec, spec_from_dict

SPACE = '[space.params.lr]\ntype = "float"\nlow = 1e-4\nhigh = 1e-2\nlog = true\n'


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch) -> Path:
    """A spec folder, with the current folder moved somewhere else."""
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    spec_dir = tmp_path / "specs"
    spec_dir.mkdir()
    return spec_dir


def write_spec(folder: Path, *, data: str = "", model: str = "", budget: str = "",
               fixed: str = "") -> Path:
    path = folder / "study.toml"
    path.write_text(f'[study]\nname = "s"\n{model}\n[data]\n{data}\n[budget]\n{budget}\n'
                    f'{SPACE}\n[space.fixed]\n{fixed}\n')
    return path


def token_file(path: Path, ids: list[int]) -> Path:
    """``path`` (PREFIX.bin) and its PREFIX.idx: a one-document Megatron dataset."""
    import torch

    from trainers.megatron import Writer

    with Writer(path.with_suffix(""), dtype=torch.uint16) as w:
        w.add_document(torch.tensor(ids))
    return path


def text_file(path: Path, n_bytes: int = 20_000) -> Path:
    path.write_bytes(bytes(i % 251 for i in range(n_bytes)))
    return path


def test_relative_corpus_is_read_from_the_spec_folder_and_stored_absolute(elsewhere: Path):
    corpus = text_file(elsewhere / "corpus.txt")
    spec = load_spec(write_spec(elsewhere, data='corpus = "corpus.txt"'))
    assert spec.data.corpus == str(corpus.resolve())


def test_a_stored_spec_revalidates_from_any_folder(elsewhere: Path, tmp_path: Path,
                                                   monkeypatch):
    text_file(elsewhere / "corpus.txt")
    (elsewhere / "m.json").write_text(json.dumps(preset("debug").to_dict()))
    spec = load_spec(write_spec(elsewhere, data='corpus = "corpus.txt"',
                                model='[model]\nfull = "m.json"\nproxy = "debug"'))
    assert spec.model.full == str((elsewhere / "m.json").resolve())
    monkeypatch.chdir(tmp_path)
    assert spec_from_dict(spec.to_dict()) == spec  # as `resume` reads it from the database


@pytest.mark.parametrize(("data", "make", "words"), [
    ('corpus = "empty.txt"', lambda d: (d / "empty.txt").write_bytes(b""), ["empty.txt", "empty"]),
    ('corpus = "missing.txt"', lambda d: None, ["missing.txt", "does not exist"]),
    ('corpus = "folder"', lambda d: (d / "folder").mkdir(), ["folder", "empty"]),
    ('corpus = "bad.npy"\nvocab_size = 300', lambda d: (d / "bad.npy").write_bytes(b"x" * 64),
     ["bad.npy", "not a .npy"]),
    ('corpus = "odd.bin"\nvocab_size = 300', lambda d: (d / "odd.bin").write_bytes(b"x" * 4001),
     ["odd.bin", "has no .idx file beside it"]),
    ('corpus = "ids.bin"\nvocab_size = 300', lambda d: token_file(d / "ids.bin", [299, 300] * 999),
     ["ids.bin", "id 300", "vocab_size=300"]),
    ('corpus = "ids.bin"', lambda d: token_file(d / "ids.bin", [1, 2] * 999),
     ["ids.bin", "positive vocab_size"]),
    ('corpus = "tiny.txt"', lambda d: text_file(d / "tiny.txt", 100),
     ["tiny.txt", "fewer than one sequence", "seq_len + 1 = 129"]),
])
def test_a_corpus_no_trial_could_train_on_is_a_spec_error(elsewhere: Path, data, make, words):
    make(elsewhere)
    with pytest.raises(SpecError) as e:
        load_spec(write_spec(elsewhere, data=data))
    assert str(e.value).startswith("data.corpus: "), str(e.value)
    for w in words + [str(elsewhere)]:
        assert w in str(e.value), (w, str(e.value))


def test_token_file_within_its_vocabulary_is_accepted(elsewhere: Path):
    token_file(elsewhere / "ids.bin", [0, 299] * 2000)
    spec = load_spec(write_spec(elsewhere, data='corpus = "ids.bin"\nvocab_size = 300'))
    assert spec.data.vocab_size == 300


@pytest.mark.parametrize("corpus", ["stdlib", "text.txt"])
def test_byte_corpora_share_one_vocabulary_rule(elsewhere: Path, corpus):
    """The model's vocabulary is the corpus' own: 256 for the stdlib and for text alike."""
    text_file(elsewhere / "text.txt")
    for ok in (0, 256):
        load_spec(write_spec(elsewhere, data=f'corpus = "{corpus}"\nvocab_size = {ok}'))
    with pytest.raises(SpecError, match=r"vocab.*256.*1000"):
        load_spec(write_spec(elsewhere, data=f'corpus = "{corpus}"\nvocab_size = 1000'))


@pytest.mark.parametrize(("fixed", "param", "longest"), [
    ("seq_len = 32", "", 32),
    ("", "", 128),  # Recipe's default seq_len
    ("", '[space.params.seq_len]\ntype = "int"\nlow = 8\nhigh = 64\n', 64),
])
def test_budget_must_hold_the_longest_sequence_the_space_allows(elsewhere: Path, fixed, param,
                                                                 longest):
    path = write_spec(elsewhere, budget=f"tokens_per_trial = {longest - 1}", fixed=fixed)
    path.write_text(path.read_text() + param)
    with pytest.raises(SpecError) as e:
        load_spec(path)
    for w in ("budget.tokens_per_trial", "one sequence", f"seq_len={longest}", str(longest - 1)):
        assert w in str(e.value), (w, str(e.value))
    path.write_text(path.read_text().replace(f"= {longest - 1}", f"= {longest}"))
    assert load_spec(path).budget.tokens_per_trial == longest


def test_model_full_is_read_from_the_spec_folder(elsewhere: Path):
    (elsewhere / "m.json").write_text(json.dumps(preset("debug").to_dict()))
    path = write_spec(elsewhere, model='[model]\nfull = "m.json"')
    assert load_spec(path).model.full == str((elsewhere / "m.json").resolve())
    (elsewhere / "m.json").write_text('{"dimm": 64}')
    with pytest.raises(SpecError, match=r"model.full: .*ModelArgs.*dimm.*m.json"):
        load_spec(path)
    (elsewhere / "m.json").unlink()
    with pytest.raises(SpecError, match=r"model.full: must be an existing JSON file"):
        load_spec(path)


def test_cli_exits_2_and_writes_nothing_on_a_bad_corpus(elsewhere: Path, capsys):
    (elsewhere / "empty.txt").write_bytes(b"")
    spec = write_spec(elsewhere, data='corpus = "empty.txt"')
    before = sorted(p.name for p in elsewhere.parent.rglob("*"))
    code = main(["submit", str(spec), "--trainer", "tuner.testing:quick_train", "--no-progress"])
    assert code == 2
    assert "data.corpus" in capsys.readouterr().err
    assert sorted(p.name for p in elsewhere.parent.rglob("*")) == before
