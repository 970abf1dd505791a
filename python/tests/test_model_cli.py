"""`llamalloc train` and `llamalloc evaluate` end to end on profile files, and their error paths."""
import gzip
import re

import numpy as np
import pytest
from conftest import run

from llamalloc import profile
from llamalloc.cli import main
from llamalloc.model import modelfile, reference
from llamalloc.model.synthetic import synthetic_samples
from llamalloc.proto import profile_pb2


def write_profile(path, samples_table=None, program="synthetic-server", symbolized=True, version=profile.VERSION):
    """A profile file in the format `llamalloc record` writes (docs/formats/profile.md), from samples rows."""
    p = profile_pb2.Profile()
    strings = {"": 0}
    p.string_table.append("")

    def s(text):
        if text not in strings:
            strings[text] = len(p.string_table)
            p.string_table.append(text)
        return strings[text]

    for name, unit in profile.SAMPLE_TYPES:
        vt = p.sample_type.add()
        vt.type, vt.unit = s(name), s(unit)
    p.comment.append(s(f"{profile.MARKER} v{version}"))
    p.comment.append(s(f"program={program}"))
    m = p.mapping.add()
    m.id, m.memory_start, m.memory_limit, m.filename, m.build_id = 1, 0x400000, 0x800000, s(program), s("abc123")
    m.has_functions = symbolized
    functions, locations = {}, {}
    rows = samples_table.to_pylist() if samples_table is not None else []
    for row in rows:
        sample = p.sample.add()
        for frame in row["stack"]:
            if frame not in locations:
                loc = p.location.add()
                loc.id = len(locations) + 1
                loc.address = 0x400000 + 16 * loc.id
                loc.mapping_id = 1
                if symbolized:
                    if frame not in functions:
                        f = p.function.add()
                        f.id, f.name, f.filename = len(functions) + 1, s(frame), s("server.cc")
                        functions[frame] = f.id
                    loc.line.add(function_id=functions[frame], line=1)
                locations[frame] = loc.id
            sample.location_id.append(locations[frame])
        counts = row["class_counts"]
        values = {"alloc_objects": sum(counts), "alloc_space": sum(counts) * row["request_size"],
                  "live_at_exit_objects": counts[7], "live_at_exit_space": counts[7] * row["request_size"]}
        values.update({f"class_{k}": counts[k] for k in range(8)})
        sample.value.extend(values.get(name, 0) for name, _ in profile.SAMPLE_TYPES)
        label = sample.label.add()
        label.key, label.num = s("request_size"), row["request_size"]
    path.write_bytes(gzip.compress(p.SerializeToString()))
    return path


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    d = tmp_path_factory.mktemp("profiles")
    rev1 = write_profile(d / "rev1.prof", synthetic_samples(150, seed=11))
    rev2 = write_profile(d / "rev2.prof", synthetic_samples(150, seed=12))
    return d, rev1, rev2


@pytest.fixture(scope="module")
def trained_model(profiles):
    d, rev1, _ = profiles
    model = d / "rev1.model"
    rc = main(["train", str(rev1), "-o", str(model), "--hidden", "16", "--epochs", "3", "--max-tokens", "32",
               "--seed", "4"])
    assert rc == 0
    return model


def test_train_reports_every_predictor_and_writes_the_model(profiles, tmp_path, capsys):
    _, rev1, _ = profiles
    model = tmp_path / "m.model"
    rc, out, err = run(["train", str(rev1), "-o", str(model), "--hidden", "16", "--epochs", "2",
                        "--max-tokens", "32", "--holdout", "0.3"], capsys)
    assert rc == 0, err
    for predictor in ("lstm (hidden 16)", "exact-match lookup", "allocation site + size"):
        assert predictor in out
    assert "held-out contexts (30% of the stacks" in out and "confusion matrix of lstm" in out
    assert "epoch   1/2" in err and "epoch   2/2" in err  # progress on stderr
    # Before the first epoch, a line while XLA compiles (otherwise nothing moves for up to 20 s).
    assert err.index("compiling the training step") < err.index("epoch   1/2")
    # Objects named as the estimate they are, beside the samples they stand on (the synthetic profile says none).
    assert re.search(r"[0-9,]+ objects \(estimated from the samples\)", err), err
    # The refit says what it ran: at most the split run's kept epoch, and the epoch it kept.
    refit = re.search(r"deployed model: .*: ran (\d+) of at most (\d+) epochs .*, kept epoch (\d+)", err)
    assert refit, err
    ran, most, kept = map(int, refit.groups())
    assert 1 <= kept <= ran <= most <= 2
    m = modelfile.read(model)
    assert m.hidden_dim == 16 and m.max_tokens == 32 and m.program == "synthetic-server"
    assert [p.name for p in tmp_path.iterdir()] == ["m.model"]  # no temporary file left behind


def test_evaluate_reports_on_another_revision_with_matching_traces(profiles, trained_model, capsys):
    _, rev1, rev2 = profiles
    rc, out, err = run(["evaluate", str(trained_model), str(rev2)], capsys)
    assert rc == 0, err
    assert "lstm (hidden 16)" in out and "exact-match lookup" in out
    line = [l for l in out.splitlines() if l.startswith("matching stack traces")][0]
    matched, total = line.split(": ")[1].split(" (")[0].split(" / ")
    assert 0 <= int(matched) < int(total)
    rc, out, _ = run(["evaluate", str(trained_model), str(rev1)], capsys)
    line = [l for l in out.splitlines() if l.startswith("matching stack traces")][0]
    # 20% of rev1's stacks were held out of the reported split, but the written model is refit on all of them
    # (--no-refit keeps the split model)
    assert "(100.00%)" in line


def test_reference_predicts_from_the_trained_file(profiles, trained_model):
    _, _, rev2 = profiles
    rows = profile.samples_table([rev2]).to_pylist()[:20]
    classes, logits = reference.predict(trained_model, [r["stack"] for r in rows], [r["request_size"] for r in rows])
    assert classes.shape == (20,) and np.all((classes >= 0) & (classes < 8))


def test_holdout_profile_trains_on_all_and_reports_on_the_other(profiles, tmp_path, capsys):
    _, rev1, rev2 = profiles
    model = tmp_path / "m.model"
    rc, out, err = run(["train", str(rev1), "--holdout-profile", str(rev2), "-o", str(model), "--hidden", "16",
                        "--epochs", "1", "--max-tokens", "32"], capsys)
    assert rc == 0, err
    assert f"contexts of {rev2}" in out and "matching stack traces" in out


def expect_error(argv, capsys, *fragments):
    rc, out, err = run(argv, capsys)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llamalloc: error: "), err
    for f in fragments:
        assert f in lines[0]
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("make, fragments", [
    (lambda p: p.write_bytes(b"not a profile at all"), ["not a llamalloc profile"]),
    (lambda p: p.write_bytes(gzip.compress(b"\x00\x01garbage")[:-6]), ["corrupt"]),
    (lambda p: write_profile(p, synthetic_samples(5), version=9), ["version 9"]),
    (lambda p: write_profile(p, None), ["no allocation samples"]),
    (lambda p: write_profile(p, synthetic_samples(5), symbolized=False), ["no symbols", "llamalloc symbolize"]),
])
def test_bad_profiles_fail_in_one_line_and_write_no_model(tmp_path, capsys, make, fragments):
    bad = tmp_path / "bad.prof"
    make(bad)
    model = tmp_path / "out.model"
    expect_error(["train", str(bad), "-o", str(model)], capsys, str(bad), *fragments)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.prof"]


def test_missing_profile_and_overlapping_holdout(profiles, tmp_path, capsys):
    _, rev1, _ = profiles
    expect_error(["train", str(tmp_path / "nope.prof"), "-o", str(tmp_path / "m")], capsys, "no such file")
    expect_error(["train", str(rev1), "--holdout-profile", str(rev1), "-o", str(tmp_path / "m")], capsys,
                 "both for training and as --holdout-profile")
    expect_error(["train", str(rev1), "--holdout", "1.5", "-o", str(tmp_path / "m")], capsys, "--holdout")
    expect_error(["train", str(rev1), "-o", str(tmp_path / "no" / "m")], capsys, "does not exist")
    expect_error(["train", str(rev1), "-o", str(tmp_path)], capsys, "is a directory")
    rc, _, err = run(["train", str(rev1), "--weight-power", "1.5", "-o", str(tmp_path / "m")], capsys)
    assert rc == 2 and "Invalid value for '--weight-power'" in err and "Traceback" not in err  # click's usage error
    assert list(tmp_path.iterdir()) == []


def test_weight_power_is_used_and_recorded_in_the_model(profiles, tmp_path, capsys):
    _, rev1, _ = profiles
    model = tmp_path / "m.model"
    rc, _, err = run(["train", str(rev1), "-o", str(model), "--hidden", "16", "--epochs", "1", "--max-tokens", "32",
                      "--weight-power", "1"], capsys)
    assert rc == 0, err
    assert modelfile.read(model).metadata["weight_power"] == 1.0


def test_evaluate_refuses_bad_model_files(profiles, trained_model, tmp_path, capsys):
    _, _, rev2 = profiles
    missing = tmp_path / "missing.model"
    expect_error(["evaluate", str(missing), str(rev2)], capsys, str(missing), "no such file")
    truncated = tmp_path / "truncated.model"
    truncated.write_bytes(trained_model.read_bytes()[:1000])
    expect_error(["evaluate", str(truncated), str(rev2)], capsys, str(truncated), "truncated")
    not_model = tmp_path / "profile-as-model"
    not_model.write_bytes(rev2.read_bytes())
    expect_error(["evaluate", str(not_model), str(rev2)], capsys, "not a llamalloc model file")


def test_the_small_held_out_warning_is_repeated_under_the_table_it_qualifies(profiles, tmp_path, capsys):
    _, rev1, _ = profiles
    rc, out, err = run(["train", str(rev1), "-o", str(tmp_path / "m.model"), "--hidden", "16", "--epochs", "1",
                        "--max-tokens", "32", "--holdout", "0.1"], capsys)
    assert rc == 0, err
    assert "warning: the held-out set is too small" in err  # before the epochs, as it was found
    lines = out.splitlines()
    at = [i for i, line in enumerate(lines) if line.startswith("warning: the held-out set is too small")]
    assert len(at) == 1 and at[0] > max(i for i, line in enumerate(lines) if "confusion matrix" in line), out


def test_a_model_path_that_cannot_be_written_is_refused_before_training(tmp_path, capsys, monkeypatch):
    from llamalloc.model import pipeline

    prof = tmp_path / "small.prof"
    write_profile(prof, synthetic_samples(5))
    monkeypatch.setattr(pipeline, "load_samples", lambda *_, **__: pytest.fail("the profiles were read (training "
                                                                               "started) before the output check"))
    # /proc takes no new file, whatever the permission bits say to root (os.access says yes).
    expect_error(["train", str(prof), "-o", "/proc/llamalloc.model"], capsys, "/proc/llamalloc.model: ",
                 "cannot write in folder /proc")
