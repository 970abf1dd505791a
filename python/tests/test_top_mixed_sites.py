"""`llamalloc top` names a call site whose objects split between short and very long lifetimes (a cache fed from
one insert function, 95% expire and 5% stay): no prediction by call stack can place them apart, and the user is
told which site it is and what would let lifetimes separate them."""
import pyarrow as pa

from llamalloc.cli import main
from test_model_cli import write_profile


def sample(stack, counts, size=64):
    return {"stack": stack, "class_counts": counts, "request_size": size}


def test_top_marks_the_site_whose_survivors_share_its_stack_with_temporaries(tmp_path, capsys):
    rows = [
        # 95 objects under 10 ms, 5 never freed: one site, two lifetimes.
        sample(["malloc", "cache::insert(int)", "main"], [95, 0, 0, 0, 0, 0, 0, 5]),
        # a site whose objects all stay, and one whose objects split within one class boundary.
        sample(["malloc", "config::load()", "main"], [0, 0, 0, 0, 0, 0, 0, 40]),
        sample(["malloc", "request::parse()", "main"], [60, 40, 0, 0, 0, 0, 0, 2]),
        # a long-lived minority below 1%: not named.
        sample(["malloc", "log::line()", "main"], [995, 0, 0, 0, 0, 0, 0, 5]),
    ]
    prof = write_profile(tmp_path / "p.prof", pa.Table.from_pylist(rows))
    assert main(["top", str(prof)]) == 0
    out = capsys.readouterr().out
    row = next(l for l in out.splitlines() if "cache::insert" in l and "<-" in l)
    assert "<10ms*" in row, out
    assert not any("*" in l.split("  ")[0] for l in out.splitlines() if "config::load" in l or "log::line" in l)
    named = out.split("*: mixed lifetimes", 1)[1].splitlines()[1:]
    assert len(named) == 2 and "cache::insert (server.cc:1): 5.0% of its objects live 1000x longer" in named[0], out
    assert "request::parse (server.cc:1): 2.0%" in named[1], out


def test_top_says_nothing_of_mixed_sites_where_there_are_none(tmp_path, capsys):
    prof = write_profile(tmp_path / "p.prof", pa.Table.from_pylist(
        [sample(["malloc", "config::load()", "main"], [0, 0, 0, 0, 0, 0, 0, 40])]))
    assert main(["top", str(prof)]) == 0
    assert "mixed lifetimes" not in capsys.readouterr().out
