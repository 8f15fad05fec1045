"""The benchmarks run end to end (tiny, Forum and Redis only: no peer's
environment, no timing asserted): bench/peers_bench.py (the raw Worker and
the task layer, with their ratios to each other and to a peer's figure,
and a profile of each run),
bench/http_bench.py, bench/node_bench.py --scheduling, bench/digest_bench.py
and bench/retry_bench.py each leave a complete report, and peers_bench
kills a run that overruns its timeout, says so, and goes on; its
``--limited`` run reports what the jobs' log says. A benchmark's
child on another tree (bench/trees.py) imports that tree's modules, of
either layout, and none of this checkout's."""

from __future__ import annotations

import json
import pstats
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import trees  # noqa: E402

pytestmark = pytest.mark.slow


def run(script: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / script), *argv],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )


def test_peers_bench_runs_forum_through_forum_serve(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    done = run("peers_bench.py", "--systems", "forum", "--jobs", "50", "--rounds", "1",
               "--no-plot", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert set(report["concurrency"]) == {"1", "8"}
    for row in report["concurrency"].values():
        assert row["forum"]["jobs"] == 50
        assert row["forum"]["jobs_per_s"] > 0
    assert report["versions"]["forum"]["forum"]


#: A "saq" Python whose versions answer but whose run never ends: it, and a
#: process it started (its pid written to the file in $1), sleep until killed.
HANGING_PYTHON = """#!/bin/sh
if [ "$1" = "-I" ]; then echo '{"saq": "0", "redis": null, "hiredis": null}'; exit 0; fi
sleep 300 &
echo $! > %s
exec sleep 300
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_peers_bench_kills_a_run_past_its_timeout_and_goes_on(tmp_path: Path) -> None:
    python, started = tmp_path / "python", tmp_path / "started.pid"
    python.write_text(HANGING_PYTHON % started)
    python.chmod(0o755)
    out = tmp_path / "peers.json"
    done = run("peers_bench.py", "--systems", "saq", "forum", "--python", f"saq={python}",
               "--jobs", "20", "--rounds", "1", "--concurrency", "1", "--run-timeout", "15",
               "--no-plot", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["timeouts"] == [{"system": "saq", "slots": 1, "round": 1}]
    row = report["concurrency"]["1"]
    assert row["saq"]["jobs_per_s"] is None
    assert row["forum"]["jobs"] == 20  # the run after the one that timed out
    assert row["forum_vs"] == {"saq": None}
    progress = done.stderr.splitlines()
    assert "peers_bench: saq, 1 slot, round 1: timeout (killed after 15 s)" in progress
    assert any(line.startswith("peers_bench: forum, 1 slot, round 1: ") for line in progress)
    assert "timeout" in done.stdout.splitlines()[2]  # the table's row for 1 slot
    assert not alive(int(started.read_text()))  # the whole process group was killed


#: A "saq" Python whose every run finishes at once at 40 jobs/s: a peer's figure
#: without a peer's environment, for the ratios the report draws from it.
FIXED_PYTHON = """#!/bin/sh
if [ "$1" = "-I" ]; then echo '{"saq": "0", "redis": null, "hiredis": null}'; exit 0; fi
echo '{"jobs": 30, "seconds": 0.75, "jobs_per_s": 40.0, "enqueue_per_s": 80.0, \
"process_per_s": 80.0}'
"""


def test_peers_bench_runs_the_task_layer_beside_the_raw_worker_and_each_peer(
    tmp_path: Path,
) -> None:
    saq = tmp_path / "python"
    saq.write_text(FIXED_PYTHON)
    saq.chmod(0o755)
    out = tmp_path / "peers.json"
    done = run("peers_bench.py", "--systems", "forum", "forum-tasks", "saq",
               "--python", f"saq={saq}", "--jobs", "30", "--rounds", "1",
               "--concurrency", "2", "--no-plot", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["targets"] == {"tasks_vs_forum_min": 0.8, "tasks_vs_fastest_peer_min": 2.0}
    assert report["versions"]["forum-tasks"]["forum"]
    row = report["concurrency"]["2"]
    assert row["forum-tasks"]["jobs"] == 30  # every job run once (noop_jobs checks it)
    tasks, forum = row["forum-tasks"], row["forum"]
    rate = tasks["jobs_per_s"]
    assert row["forum_vs"] == {"saq": forum["jobs_per_s"] / 40.0}  # Forum's are not peers
    phases = {p: tasks[f"{p}_per_s"] / forum[f"{p}_per_s"] for p in ("enqueue", "process")}
    assert row["tasks"] == {
        "vs_forum": rate / forum["jobs_per_s"],
        "vs": {"saq": rate / 40.0},
        "vs_fastest_peer": rate / 40.0,
        "pass_vs_forum": rate / forum["jobs_per_s"] >= 0.8,
        "pass_vs_fastest_peer": rate / 40.0 >= 2.0,
        "phases_vs_forum": phases,
    }
    table = done.stdout.splitlines()
    assert table[1].split() == ["c", "forum", "forum-tasks", "saq", "/saq"]
    assert table[3].startswith("forum-tasks (App.enqueue + app.worker): / forum (raw Worker)")
    assert table[4].split() == ["c", "/forum", "enqueue", "process", "/saq", "/fastest"]
    shown = [rate / forum["jobs_per_s"], *phases.values(), rate / 40.0, rate / 40.0]
    assert table[5].split() == ["2", *(f"{r:.2f}x" for r in shown)]


def test_peers_bench_profiles_each_run_into_a_file_of_its_own(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    done = run("peers_bench.py", "--systems", "forum-tasks", "--jobs", "10", "--rounds", "2",
               "--concurrency", "1", "--profile", str(profiles), "--no-plot",
               "--out", str(tmp_path / "peers.json"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "peers.json").read_text())["profiled"] is True
    names = ["forum-tasks-c1-r1.pstats", "forum-tasks-c1-r2.pstats"]
    assert sorted(path.name for path in profiles.iterdir()) == names
    for name in names:  # the worker's side is in it: the task layer's handler ran
        # Stats.stats: (file, line, function) -> counts; undeclared in typeshed,
        # and get_stats_profile() keys by bare function name (one __call__ for all).
        stats = pstats.Stats(str(profiles / name)).stats  # type: ignore[attr-defined]
        runner = {
            function for file, _, function in stats if file.endswith("tasks/forum/tasks/runner.py")
        }
        assert "__call__" in runner, sorted(runner)


def test_peers_bench_says_in_one_line_that_a_peer_has_no_environment(tmp_path: Path) -> None:
    done = run("peers_bench.py", "--systems", "saq", "--python", f"saq={tmp_path}/none",
               "--no-plot", "--out", str(tmp_path / "peers.json"))  # fmt: skip
    assert done.returncode == 1
    assert (
        done.stderr.strip()
        == f"peers_bench: saq: no Python at {tmp_path}/none (run scripts/bench-env)"
    )
    assert not (tmp_path / "peers.json").exists()


def test_peers_bench_looks_for_the_peers_venvs_under_venvs(tmp_path: Path) -> None:
    done = run("peers_bench.py", "--systems", "forum", "arq", "--venvs", str(tmp_path),
               "--no-plot", "--out", str(tmp_path / "peers.json"))  # fmt: skip
    assert done.returncode == 1
    python = tmp_path / ".venv-bench-arq" / "bin" / "python"
    assert done.stderr.strip() == f"peers_bench: arq: no Python at {python} (run scripts/bench-env)"


#: A "celery" Python for --limited: its versions answer; a worker says it is
#: ready, and the first of a run's two writes the six jobs below to the log
#: (as bench/limited_jobs.py's do: KEY START END), then both sleep until
#: killed; the producer says it began enqueueing at 100.0.
LIMITED_PYTHON = """#!/bin/sh
if [ "$1" = "-I" ]; then echo '{"celery": "0", "kombu": null, "redis": null}'; exit 0; fi
if [ "$2" = "produce" ]; then echo '{"enqueue_started": 100.0, "enqueued": 100.01}'; exit 0; fi
while [ $# -gt 0 ]; do
    case "$1" in --log) log=$2;; --ready) ready=$2;; esac
    shift
done
echo "ready $$" >> "$ready"
if mkdir "$ready.wrote" 2>/dev/null; then
    printf '%s\\n' "k0 100.0 100.3" "k0 100.1 100.4" "k0 100.2 100.5" \\
        "k1 100.0 100.1" "k1 100.1 100.2" "k2 100.05 100.6" >> "$log"
fi
exec sleep 300
"""


def test_peers_bench_limited_reports_what_the_jobs_log_says(tmp_path: Path) -> None:
    """k0's three jobs overlap from 100.2 to 100.3: 3 running at once; k1's
    two only touch (one ends as the other starts): 1; all keys: 4 (k0's
    three and k2's, at 100.2). Six jobs from 100.0 to 100.6: 10 jobs/s;
    their starts span 0.2 s (25/s: 0.5 of the rate scenario's 50/s), all six
    in one second."""
    celery = tmp_path / "python"
    celery.write_text(LIMITED_PYTHON)
    celery.chmod(0o755)
    out = tmp_path / "limits.json"
    done = run("peers_bench.py", "--limited", "--systems", "celery", "--python",
               f"celery={celery}", "--jobs", "6", "--rounds", "1", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["scenarios"]["keys"] == {
        "keys": 8, "max_running": 2, "rate": 0, "sleep": 0.02, "jobs": 6,
    }  # fmt: skip
    keys, rate = report["results"]["keys"]["celery"], report["results"]["rate"]["celery"]
    (run_,) = keys["runs"]
    assert run_["max_running_by_key"] == {"k0": 3, "k1": 1, "k2": 1}
    assert (keys["max_running_per_key"], keys["max_running"]) == (3, 4)
    assert keys["enforced"] is False  # Celery has no per-key limit
    assert keys["complete"] is True and run_["jobs"] == 6
    assert keys["jobs_per_s"] == pytest.approx(10.0)
    assert rate["enforced"] is True
    assert rate["steady_rate_per_s"] == pytest.approx(25.0)
    assert rate["steady_rate_vs_limit"] == pytest.approx(0.5)
    assert (rate["most_starts_in_1s"], rate["most_starts_in_1s_vs_limit"]) == (6, 0.12)
    table = (tmp_path / "limits.txt").read_text().splitlines()
    assert table == done.stdout.splitlines()[: len(table)]
    assert table[4].split() == ["celery", "10", "3", "(none)", "4"]
    assert table[8].split() == ["celery", "10.0", "25.0", "0.500x", "6", "0.12x"]


def test_peers_bench_limited_says_in_one_line_that_bullmq_is_not_installed(
    tmp_path: Path,
) -> None:
    done = run("peers_bench.py", "--limited", "--systems", "bullmq", "--venvs", str(tmp_path),
               "--out", str(tmp_path / "limits.json"))  # fmt: skip
    assert done.returncode == 1
    modules = tmp_path / "bench" / "peers" / "bullmq"
    assert done.stderr.strip() == (
        f"peers_bench: bullmq: no node_modules in {modules} (run scripts/bench-env)"
    )


def test_http_bench_compares_the_reliable_job(tmp_path: Path) -> None:
    out = tmp_path / "http.json"
    done = run("http_bench.py", "--seconds", "0.2", "--repeats", "1", "--clients", "1",
               "--prefill", "20", "--no-plot", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    (only,) = json.loads(out.read_text())["runs"]
    assert only["fsync"] == "always"
    measured = {(r["system"], r["work"]) for r in only["results"]}
    works = ("write", "take", "job", "batch job")
    assert measured == {(s, w) for s in ("forum", "redis") for w in works}
    takes = [r for r in only["results"] if r["work"] == "take"]
    assert [r["ops"] for r in takes] == [20, 20]  # each drained its prefill, reserved and acked


def test_http_bench_groups_runs_the_job_on_nodes_each_a_group(tmp_path: Path) -> None:
    out = tmp_path / "http.json"
    done = run("http_bench.py", "--groups", "2", "--works", "job", "take", "--seconds", "0.2",
               "--repeats", "1", "--clients", "2", "--prefill", "20", "--no-plot",
               "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["shape"]["groups"] == 2
    (only,) = report["runs"]
    measured = {(r["system"], r["work"]) for r in only["results"]}
    assert measured == {(s, w) for s in ("forum", "redis") for w in ("take", "job")}
    takes = [r for r in only["results"] if r["work"] == "take"]
    # Each client's keyed prefill went to its home group, and it drained it there.
    assert [r["ops"] for r in takes] == [20, 20]
    assert set(only["job_ratio"]) == {"2"}


def test_routing_bench_compares_the_clients_and_profiles_routing(tmp_path: Path) -> None:
    out, profile = tmp_path / "routing.json", tmp_path / "routing.prof"
    done = run("routing_bench.py", "--writes", "50", "--rounds", "2", "--profile", str(profile),
               "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    sides = {"forum_client", "cluster_client", "forum_client_and_owner"}
    assert set(report["median_client_ms_per_write"]) == sides
    assert all(len(rounds) == 2 for rounds in report["client_ms_per_write"].values())
    functions = [row["function"] for row in report["profile"]["routing_functions"]]
    assert any(f.startswith("cluster.py:") for f in functions)  # ClusterClient's own
    assert pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]


def test_scaling_bench_groups_runs_groups_under_one_map_beside_a_mesh(tmp_path: Path) -> None:
    out = tmp_path / "groups.json"
    done = run("scaling_bench.py", "--groups", "1,2", "--replicas", "1", "--mesh", "2",
               "--jobs", "40", "--producer-rate", "200", "--no-plot",
               "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["all_valid"]
    summary = report["summary"]
    assert set(summary) == {"1x1", "2x1", "1x2"}
    for shape in summary.values():
        assert shape["takes_per_job"] >= 1
        assert shape["strand_bytes_per_job"] > 0
    # Each node holds a job of its group once: two members, about two copies.
    assert summary["1x2"]["strand_copies_per_job"] > summary["2x1"]["strand_copies_per_job"]
    assert set(report["targets"]) == {"1x1", "2x1"}


def test_retry_bench_runs_a_retry_parked_and_delayed_by_the_node(tmp_path: Path) -> None:
    out = tmp_path / "retry.json"
    done = run("retry_bench.py", "--jobs", "20", "--rounds", "1", "--backoff", "0.1",
               "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    medians = json.loads(out.read_text())["medians"]
    assert set(medians) == {"parked", "delayed"}
    assert medians["parked"]["deferred_per_job"] > 0
    # The Lens holds each job's due time (issue 29): a copy the node makes
    # live by its own clock a little before Redis's is parked until due too.
    assert medians["delayed"]["deferred_per_job"] < medians["parked"]["deferred_per_job"]
    for row in medians.values():
        assert row["late_ms_p99"] >= row["late_ms_p50"]


def test_node_bench_scheduling_reports_every_row_against_its_target(tmp_path: Path) -> None:
    out = tmp_path / "scheduling.json"
    done = run("node_bench.py", "--scheduling", "--live", "2000", "--seconds", "0.1",
               "--rounds", "1", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert (report["live"], report["delayed"], len(report["priorities"])) == (2000, 222, 10)
    assert report["targets"] == {"latency_p99_ratio_max": 1.2, "write_ratio_min": 0.9}
    patterns, steps = (
        ("exact", "prefix_1pct", "prefix_100pct"),
        ("read", "index_take", "forum_take"),
    )
    latency = report["latency"]
    assert [(r["pattern"], r["step"]) for r in latency] == [(p, s) for p in patterns for s in steps]
    for row in latency:
        assert row["p99_ratio"] == row["mixed_p99_us"] / row["plain_p99_us"]
        assert row["pass"] == (row["p99_ratio"] <= 1.2)
        assert {"plain_gc_ms", "mixed_gc_ms", "plain_gc_full", "mixed_gc_full"} <= set(row)
    rates = ("always_c1", "always_c64", "never_c1", "never_c64")
    writes = report["writes"]
    assert [(r["rate"], r["variant"]) for r in writes] == [
        (rate, variant) for rate in rates for variant in ("ttl_priority", "delay")
    ]
    for row in writes:
        assert row["ratio"] == row["write_per_s"] / row["plain_write_per_s"]
        assert row["pass"] == (row["ratio"] >= 0.9)
        assert row["in_target"] == (row["variant"] == "ttl_priority")
    in_target = [r["pass"] for r in latency + writes if r["in_target"]]
    assert report["pass"] == all(in_target)
    assert {kind: len(runs) for kind, runs in report["runs"].items()} == {
        "latency-plain": 1, "latency-mixed": 1,
        "writes-plain": 1, "writes-ttl_priority": 1, "writes-delay": 1,
    }  # fmt: skip
    table = done.stdout.splitlines()
    assert table[0].startswith(
        "take/read at 2000 live tuples: plain vs 10 priorities + 222 delayed"
    )
    assert [line.split()[:2] for line in table[2:11]] == [[p, s] for p in patterns for s in steps]
    assert table[11].startswith("write rate with options vs plain")
    assert [line.split()[:2] for line in table[13:21]] == [
        [rate, variant] for rate in rates for variant in ("ttl_priority", "delay")
    ]
    assert table[21] in ("all within the targets", "NOT all within the targets")


def test_node_bench_scheduling_runs_one_half_on_two_versions(tmp_path: Path) -> None:
    """``--only writes --against DIR``: the write rates alone, each on version
    A (here this same tree) and B, both reports kept and shown side by side."""
    out = tmp_path / "against.json"
    done = run("node_bench.py", "--scheduling", "--only", "writes", "--against", str(BENCH.parent),
               "--seconds", "0.05", "--rounds", "1", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["against"] == str(BENCH.parent) and {"A", "B"} <= set(report)
    for side in ("A", "B"):
        assert report[side]["latency"] == [] and len(report[side]["writes"]) == 8
        assert set(report[side]["runs"]) == {"writes-plain", "writes-ttl_priority", "writes-delay"}
    table = done.stdout.splitlines()
    assert table[0].startswith("write rate with options vs plain")
    against = table.index(f"A ({BENCH.parent}) against B (this tree), medians of 1 rounds each")
    assert [line.split()[:2] for line in table[against + 2 :]] == [
        [rate, variant]
        for rate in ("always_c1", "always_c64", "never_c1", "never_c64")
        for variant in ("ttl_priority", "delay")
    ]


def test_watch_bench_reports_each_case(tmp_path: Path) -> None:
    out = tmp_path / "watch.json"
    done = run("watch_bench.py", "--writes", "1000", "--rounds", "1", "--out", str(out))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert set(report["writes_per_s"]) == {"plain", "hub", "hub+10"}
    assert report["http_events_per_s"] > 0


def test_digest_bench_leaves_a_complete_report(tmp_path: Path) -> None:
    """bench/digest_bench.py end to end, tiny, with this very tree as the
    tree to compare with (so both variants run)."""
    out = tmp_path / "digest.json"
    done = run("digest_bench.py", "--main-tree", str(BENCH.parent), "--rounds", "1",
               "--idle", "1", "--backlogs", "0,100", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["entry_hash_us"] > 0
    assert set(report["summary_idle_node_cpu_ms_per_s"]) == {"0", "100"}
    assert {(r["variant"], r["backlog"]) for r in report["runs"]} == {
        ("digest", 0),
        ("main", 0),
        ("digest", 100),
        ("main", 100),
    }


def files(root: Path, contents: dict[str, str]) -> Path:
    for name, text in contents.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


#: A child's script: where the Forum, the Lens and the Worker it imported come from.
WHERE = """
import sys
from forum.coordinator import Lens
from forum.coordinator.worker import Worker
from forum.node.space.forum import Forum

def where():
    return [sys.modules[kind.__module__].__file__ for kind in (Forum, Lens, Worker)]
"""


def test_a_child_on_a_tree_of_the_older_layout_imports_its_modules(tmp_path: Path) -> None:
    """Each part a top-level package (node, coordinator, ...): the child's
    forum.node.space.forum is the tree's node.forum, forum.coordinator its
    coordinator, not this checkout's (which an editable install offers)."""
    tree = files(tmp_path / "tree", {
        "forum/__init__.py": "",
        "node/__init__.py": "",
        "node/forum.py": "class Forum: ...",
        "coordinator/__init__.py": "class Lens: ...",
        "coordinator/worker.py": "class Worker: ...",
    })  # fmt: skip
    script = files(tmp_path, {"where.py": WHERE}) / "where.py"
    assert trees.run_child(script, "where", tree, []) == [
        str(tree / "node/forum.py"),
        str(tree / "coordinator/__init__.py"),
        str(tree / "coordinator/worker.py"),
    ]
    assert [trees.older_name(name) for name in (
        "forum.node.space.forum", "forum.node.core.space", "forum.node.http.app",
        "forum.node.client.remote", "forum.node.config.node", "forum.node.space",
        "forum.deploy.demo", "forum.cli",
    )] == [
        "node.forum", "node.space", "node.web_app",
        "node.client", "node.config", "",
        "deploy.demo", None,
    ]  # fmt: skip
    assert trees.named_in(tree, "forum.deploy.demo:open_handler") == "deploy.demo:open_handler"


def test_a_child_on_a_tree_imports_nothing_of_this_checkout(tmp_path: Path) -> None:
    """The parts as folders (node/forum/node/...): the child's modules are
    the tree's, and one the tree lacks is an ImportError, not this checkout's."""
    extend = "from pkgutil import extend_path\n__path__ = extend_path(__path__, __name__)\n"
    tree = files(tmp_path / "tree", {
        "forum/__init__.py": extend,
        "node/forum/node/__init__.py": "",
        "node/forum/node/space/__init__.py": "",
        "node/forum/node/space/forum.py": "class Forum: ...",
        "coordinator/forum/coordinator/__init__.py": "class Lens: ...",
    })  # fmt: skip
    script = files(tmp_path, {"where.py": WHERE}) / "where.py"
    with pytest.raises(subprocess.CalledProcessError) as failed:
        trees.run_child(script, "where", tree, [])
    assert "No module named 'forum.coordinator.worker'" in failed.value.stderr
    files(tree, {"coordinator/forum/coordinator/worker.py": "class Worker: ..."})
    assert trees.run_child(script, "where", tree, []) == [
        str(tree / "node/forum/node/space/forum.py"),
        str(tree / "coordinator/forum/coordinator/__init__.py"),
        str(tree / "coordinator/forum/coordinator/worker.py"),
    ]
