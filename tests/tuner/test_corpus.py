"""Text + tokenizer corpora (tuner.corpus): documents from text, .jsonl and .parquet, tokenized
once into a cached Megatron dataset; bad input named, nothing left in the cache."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers

from tuner.app.cli import main
from tuner.corpus import CorpusError, load, tokenize
from tuner.study.specs.spec import SpecError, load_spec

WORDS = ["<|endoftext|>", "[UNK]", "hello", "world", "moe", "tune", "again"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MOETUNE_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def tok_file(tmp_path) -> Path:
    """A word-level tokenizer.json: ids are the WORDS' positions, <|endoftext|> is 0."""
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def _ids(text: str) -> list[int]:
    return [WORDS.index(w) if w in WORDS else 1 for w in text.split()] + [0]  # + EOD


def _folder(tmp_path: Path) -> tuple[Path, list[str]]:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.txt").write_text("hello world " * 50)
    (folder / "b.jsonl").write_text("\n".join(json.dumps({"text": t, "id": i})
                                              for i, t in enumerate(["moe tune", "tune again"])))
    pd.DataFrame({"text": ["world hello moe", "again again"]}).to_parquet(folder / "c.parquet")
    return folder, ["hello world " * 50, "moe tune", "tune again", "world hello moe",
                    "again again"]


def test_text_jsonl_and_parquet_tokenize_with_eod_between_documents(tmp_path, tok_file):
    folder, docs = _folder(tmp_path)
    corpus = load(str(folder), tokenizer=str(tok_file))
    want = sum((_ids(d) for d in docs), [])
    assert corpus.tokens.to(torch.int64).tolist() == want
    assert corpus.vocab_size == len(WORDS) and len(corpus.doc_starts) == len(docs)


def test_a_trial_maps_the_cached_dataset_without_reading_the_text(tmp_path, tok_file,
                                                                  monkeypatch):
    folder, _ = _folder(tmp_path)
    first = tokenize(str(folder), tokenizer=str(tok_file))
    assert first.prefix.with_suffix(".bin").is_file() and first.meta["documents"] == 5

    def no_tokenizing(*a, **k):
        raise AssertionError("tokenized again")

    monkeypatch.setattr("tuner.corpus.build._write", no_tokenizing)
    assert load(str(folder), tokenizer=str(tok_file)).hash == load(
        str(first.prefix), vocab=len(WORDS)).hash
    (folder / "a.txt").write_text("moe moe")  # a changed file is a new key: tokenized again
    with pytest.raises(AssertionError, match="tokenized again"):
        load(str(folder), tokenizer=str(tok_file))


def test_a_tokenizer_gives_a_megatron_dataset_its_vocabulary(tmp_path, tok_file):
    from trainers.megatron import Writer

    with Writer(tmp_path / "ids", dtype=torch.uint16) as w:
        w.add_document(torch.tensor([2, 3, 0] * 100))
    assert load(str(tmp_path / "ids"), tokenizer=str(tok_file)).vocab_size == len(WORDS)


def test_bpe_trains_on_the_corpus_once(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 400)
    corpus = load(str(text), tokenizer="bpe:300")
    assert corpus.vocab_size == 300 and int(corpus.tokens.to(torch.int64).max()) < 300
    assert len(corpus.tokens) < 0.5 * text.stat().st_size  # subwords, not bytes
    kept = (tmp_path / "cache" / "tokenizers").glob("bpe300-*.json")
    assert len([p for p in kept if not p.name.endswith(".meta.json")]) == 1
    assert tokenize(str(text), tokenizer="bpe:300").meta["bpe_train_s"] > 0  # from the 1st


BAD = [  # (what breaks, the [data] keys, make the files, the key the error names, its words)
    ("tokenizer.json does not parse", {"tokenizer": "bad.json"},
     lambda d: (d / "bad.json").write_text("{not json"), "tokenizer",
     ["bad.json", "does not parse as a tokenizer.json"]),
    ("missing tokenizer", {"tokenizer": "none.json"}, lambda d: None, "tokenizer",
     ["none.json", "does not exist"]),
    ("bpe without a size", {"tokenizer": "bpe:many"}, lambda d: None, "tokenizer",
     ["'bpe:N'", "bpe:many"]),
    ("bpe smaller than the bytes", {"tokenizer": "bpe:100"}, lambda d: None, "tokenizer",
     ["N >= 257", "bpe:100"]),
    ("jsonl line without the field", {"corpus": "x.jsonl"},
     lambda d: (d / "x.jsonl").write_text('{"text": "hello"}\n{"body": "world"}\n'),
     "text_field", ["x.jsonl", "line 2 has no field 'text'", "['body']"]),
    ("jsonl line not JSON", {"corpus": "x.jsonl"},
     lambda d: (d / "x.jsonl").write_text('{"text": "hello"}\n{oops\n'), "corpus",
     ["x.jsonl", "line 2 is not JSON"]),
    ("jsonl field not text", {"corpus": "x.jsonl"},
     lambda d: (d / "x.jsonl").write_text('{"text": 7}\n'), "text_field",
     ["x.jsonl", "line 1", "must be a string, but got int"]),
    ("parquet without the column", {"corpus": "x.parquet", "text_field": "content"},
     lambda d: pd.DataFrame({"text": ["a"]}).to_parquet(d / "x.parquet"), "text_field",
     ["x.parquet", "no column 'content'", "['text']"]),
    ("unknown eod token", {"eod_token": "<eos>"}, lambda d: None, "eod_token",
     ["'<eos>' is not a token"]),
    ("vocab smaller than the tokenizer's", {"vocab_size": 3}, lambda d: None, "vocab_size",
     ["(7 for", "but got 3"]),
]


@pytest.mark.parametrize(("case", "keys", "make", "field", "words"), BAD,
                         ids=[b[0] for b in BAD])
def test_bad_text_or_tokenizer_is_a_spec_error_and_writes_nothing(tmp_path, tok_file, case,
                                                                   keys, make, field, words):
    (tmp_path / "t.txt").write_text("hello world " * 500)
    make(tmp_path)
    keys = {"corpus": "t.txt", "tokenizer": tok_file.name} | keys
    data = "\n".join(f"{k} = {json.dumps(v)}" for k, v in keys.items())
    spec = tmp_path / "s.toml"
    spec.write_text(f'[study]\nname = "s"\n[data]\n{data}\n[budget]\ntokens_per_trial = 4096\n'
                    '[space.params.lr]\ntype = "float"\nlow = 1e-4\nhigh = 1e-2\nlog = true\n'
                    '[space.fixed]\nseq_len = 32\n')
    with pytest.raises(SpecError) as e:
        load_spec(spec)
    assert str(e.value).startswith(f"data.{field}: "), str(e.value)
    for w in words:
        assert w in str(e.value), (case, str(e.value))
    assert not list((tmp_path / "cache").rglob("*.bin")) and not list(
        (tmp_path / "cache").rglob("meta.json"))
    assert main(["submit", str(spec), "--root", str(tmp_path / "runs")]) == 2
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_blend_of_text_and_ids_is_refused(tmp_path, tok_file):
    from trainers.megatron import Writer

    with Writer(tmp_path / "ids", dtype=torch.uint16) as w:
        w.add_document(torch.tensor([2, 3, 0] * 100))
    (tmp_path / "t.txt").write_text("hello world " * 100)
    with pytest.raises(CorpusError, match="all be text or all token ids"):
        load(f"1 {tmp_path / 'ids'} 1 {tmp_path / 't.txt'}", tokenizer=str(tok_file))


def test_a_blend_of_texts_tokenizes_each_part(tmp_path, tok_file):
    (tmp_path / "a.txt").write_text("hello world " * 200)
    (tmp_path / "b.txt").write_text("moe tune " * 200)
    blend = load(f"3 {tmp_path / 'a.txt'} 1 {tmp_path / 'b.txt'}", tokenizer=str(tok_file))
    assert blend.weights == (0.75, 0.25) and [len(p.tokens) for p in blend.parts] == [401, 401]


def test_bpe_over_a_blend_is_refused(tmp_path):
    for name in ("a", "b"):
        (tmp_path / f"{name}.txt").write_text("hello world " * 100)
    with pytest.raises(CorpusError, match="one vocabulary per part"):
        load(f"1 {tmp_path / 'a.txt'} 1 {tmp_path / 'b.txt'}", tokenizer="bpe:300")
    assert not (tmp_path / "cache").exists()


def test_corpus_errors_name_their_key():
    e = CorpusError("text_field", "x")
    assert isinstance(e, ValueError) and e.field == "text_field"


def test_a_trial_of_a_tokenizer_study_trains_on_the_tokenized_corpus(tmp_path):
    """The spec's [data] keys reach the trial (runner._job -> Training -> train_and_report),
    and the proxy takes the tokenizer's vocabulary."""
    from types import SimpleNamespace

    from trainers import Recipe
    from tuner.study.run.runner import _job
    from tuner.study.specs.proxy import resolve_model_args
    from tuner.study.specs.spec import parse_spec
    from tuner.study.trial.trainable import train_and_report
    from tuner.testing import make_result

    (tmp_path / "t.txt").write_text("the quick brown fox jumps over the lazy dog. " * 400)
    spec = parse_spec({"study": {"name": "s"}, "model": {"preset": "debug"},
                       "data": {"corpus": "t.txt", "tokenizer": "bpe:300"},
                       "space": {"params": {"lr": {"type": "float", "low": 1e-4,
                                                   "high": 1e-2, "log": True}}}},
                      base_dir=tmp_path)
    args = resolve_model_args(spec)
    assert args.vocab_size == 300
    job = _job(spec, SimpleNamespace(model_args=args))
    seen = {}

    def trainer(model_args, recipe, *, data, token_budget, **kw):
        seen.update(vocab=data.vocab_size, n=len(data.tokens), model_vocab=model_args.vocab_size)
        return make_result(recipe, token_budget=token_budget, val_loss=3.0)

    report = train_and_report({"recipe": Recipe().to_dict()}, job=job, trainer=trainer,
                              env={"device": "cpu"})
    assert report.status == "ok", report.reason
    expected = load(str(tmp_path / "t.txt"), tokenizer="bpe:300")
    assert seen == {"vocab": 300, "n": len(expected.tokens), "model_vocab": 300}
    assert report.environment["corpus_hash"] == expected.hash
