"""Built-in models are recorded by their built-in name (issue 36): a path into the shipped worlds, of this
install or of another (gone) one, records and reads as ``tiny``, ``tiny-junior``, ...; an old run recorded
with such a path reads, resumes and compares as the same run; a run read while the package lives
elsewhere finds its models there; and a mixed-tokenizer pool evaluates under the text protocol and is
refused the stream protocol in one line before any model loads."""

import json
import shutil
from pathlib import Path

import pytest

import tandem_rlvr.world.shipped as shipped
from tandem_rlvr.cli import main
from tandem_rlvr.models import recorded_model, recorded_pool_spec

GONE = "/gone/lib/python3.11/site-packages/tandem_rlvr/world/shipped"  # another install's shipped worlds


def test_a_path_into_any_installs_shipped_worlds_records_as_the_built_in_name(tmp_path):
    here = shipped.SHIPPED_DIR
    assert recorded_model(str(here / "tiny" / "senior")) == "tiny"
    assert recorded_model(str(here / "tiny-drift" / "junior")) == "tiny-drift-junior"
    assert recorded_model(f"{GONE}/tiny/junior") == "tiny-junior"
    assert recorded_model(f"{GONE}/tiny-xjunior/junior") == "tiny-xjunior"
    assert recorded_model("tiny-code-junior") == "tiny-code-junior" and recorded_model(None) is None
    # not a shipped model: a world that is not shipped, another folder, a hub id, a local path (absolute)
    assert recorded_model(f"{GONE}/tiny-other/junior") == f"{GONE}/tiny-other/junior"
    assert recorded_model(f"{GONE}/tiny/checkpoint-3") == f"{GONE}/tiny/checkpoint-3"
    assert recorded_model("owner/model") == "owner/model"
    (tmp_path / "m").mkdir()
    assert recorded_model(str(tmp_path / "m")) == str((tmp_path / "m").resolve())
    assert recorded_pool_spec(f"{GONE}/tiny/junior:0.25,tiny-xjunior:0.75") == "tiny-junior:0.25,tiny-xjunior:0.75"


def test_an_old_training_run_recorded_by_a_shipped_path_resumes_under_the_built_in_name(tmp_path):
    from tandem_rlvr.config import load_train_config
    from tandem_rlvr.errors import TandemError
    from tandem_rlvr.rl.run_identity import check_run_dir, stored_config

    cfg = load_train_config("tiny", None, {"junior": "tiny-junior,tiny-xjunior", "output_dir": str(tmp_path / "r")})
    new = stored_config(cfg)
    assert new["senior"] == "tiny" and new["junior"] == "tiny-junior:0.5,tiny-xjunior:0.5"
    (tmp_path / "r").mkdir()
    old = {**new, "senior": f"{GONE}/tiny/senior", "junior": f"{GONE}/tiny/junior:0.5,{GONE}/tiny-xjunior/junior:0.5"}
    (tmp_path / "r" / "config.json").write_text(json.dumps(old))
    assert check_run_dir(cfg) == 0  # the same run: not refused
    (tmp_path / "r" / "config.json").write_text(json.dumps({**old, "senior": f"{GONE}/tiny-drift/senior"}))
    with pytest.raises(TandemError, match="different senior"):  # another built-in model is another run
        check_run_dir(cfg)


def _handoff(out, *extra):
    return main(["eval", "handoff", "--senior", "tiny", "--limit", "2", "--n", "2", "--max-tokens", "8",
                 "--out", str(out), *extra])


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    """A text-protocol handoff run of the tiny senior with the pool tiny-junior,tiny-xjunior, its juniors given
    as paths into this install's shipped worlds."""
    out = tmp_path_factory.mktemp("names") / "mixed"
    pool = f"{shipped.SHIPPED_DIR / 'tiny' / 'junior'},{shipped.SHIPPED_DIR / 'tiny-xjunior' / 'junior'}"
    assert _handoff(out, "--junior", pool) == 0
    return out


def test_a_mixed_tokenizer_pool_evaluates_under_the_text_protocol_recording_built_in_names(mixed_run):
    cfg = json.loads((mixed_run / "config.json").read_text())
    assert cfg["schedule"]["protocol"] == "text"
    assert cfg["models"] == {"senior": "tiny", "junior": "tiny-junior:0.5,tiny-xjunior:0.5"}
    assert cfg["schedule"]["pool"]["juniors"] == ["tiny-junior", "tiny-xjunior"]
    rows = [json.loads(x) for x in (mixed_run / "samples.jsonl").read_text().splitlines()]
    assert {r["junior"] for r in rows} <= {"tiny-junior", "tiny-xjunior"} and len(rows) == 4


def test_a_run_recorded_by_another_installs_paths_reads_and_resumes_where_the_package_lives_now(
        mixed_run, tmp_path, monkeypatch, capsys):
    from tandem_rlvr.eval.measure.drift import _tokenizer
    from tandem_rlvr.eval.run_files import read_run

    # the run as an older tandem in another install wrote it: absolute paths into its shipped worlds
    old = tmp_path / "old"
    shutil.copytree(mixed_run, old)
    cfg = json.loads((old / "config.json").read_text())
    gone = {"tiny": f"{GONE}/tiny/senior", "tiny-junior": f"{GONE}/tiny/junior",
            "tiny-xjunior": f"{GONE}/tiny-xjunior/junior"}
    cfg["models"] = {"senior": gone["tiny"], "junior": f"{gone['tiny-junior']}:0.5,{gone['tiny-xjunior']}:0.5"}
    cfg["schedule"]["pool"]["juniors"] = [gone["tiny-junior"], gone["tiny-xjunior"]]
    inputs = cfg["inputs"]["models"]
    cfg["inputs"]["models"] = {(f"junior/{gone[recorded_model(r[7:])]}" if r.startswith("junior/") else r): fp
                               for r, fp in inputs.items()}
    (old / "config.json").write_text(json.dumps(cfg))
    rows = [json.loads(x) for x in (old / "samples.jsonl").read_text().splitlines()]
    (old / "samples.jsonl").write_text("".join(json.dumps({**r, "junior": gone[r["junior"]]}) + "\n" for r in rows))
    # the package now lives elsewhere: a copy of its shipped worlds at another root
    moved = tmp_path / "pkg" / "tandem_rlvr" / "world" / "shipped"
    for w in ("tiny", "tiny-xjunior"):
        shutil.copytree(shipped.SHIPPED_DIR / w, moved / w)
    monkeypatch.setattr(shipped, "SHIPPED_DIR", moved)
    run = read_run(old)
    assert run.config["models"] == {"senior": "tiny", "junior": "tiny-junior:0.5,tiny-xjunior:0.5"}
    assert run.config["schedule"]["pool"]["juniors"] == ["tiny-junior", "tiny-xjunior"]
    assert [r["junior"] for r in run.rows] == [r["junior"] for r in rows]
    tok = _tokenizer(run)  # eval drift's: found through the built-in name, in the moved package
    assert Path(tok.name_or_path).resolve() == (moved / "tiny" / "senior").resolve()
    # a resume with the built-in names is the same run (nothing to sample: it is complete)
    capsys.readouterr()
    assert _handoff(old, "--junior", "tiny-junior,tiny-xjunior") == 0, capsys.readouterr().err


def test_a_mixed_tokenizer_pool_is_refused_the_stream_protocol_in_one_line_before_any_model_loads(
        tmp_path, monkeypatch, capsys):
    import tandem_rlvr.models as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    out = tmp_path / "s"
    assert _handoff(out, "--junior", "tiny-junior,tiny-xjunior", "--protocol", "stream", "--schedule", "word") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tandem: error: --protocol stream needs one tokenizer, and junior "
                                               "tiny-xjunior of the pool has another vocabulary")
    assert err[0].endswith("use --protocol text") and not out.exists()


def test_a_pool_juniors_label_is_its_built_in_name_however_it_was_given():
    from tandem_rlvr.models import recorded_labels
    from tandem_rlvr.pool import JuniorPool

    pool = JuniorPool.parse(f"{shipped.SHIPPED_DIR / 'tiny' / 'junior'},{GONE}/tiny-xjunior/junior")
    assert "tiny-junior" not in pool.labels  # the given names give their own labels
    assert recorded_labels(pool) == ("tiny-junior", "tiny-xjunior")
