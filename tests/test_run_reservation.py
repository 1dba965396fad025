"""Fits started together get separate ``version_N`` folders: ``place_run`` reserves the number with ``os.mkdir``."""

import multiprocessing as mp
from types import SimpleNamespace

from lightning.pytorch.loggers import TensorBoardLogger

from lit_rlvr.run.loggers import CSVLogger
from lit_rlvr.run.runs import place_run, reserve_version


def _place(root: str) -> int:
    loggers = [CSVLogger(root, name="csv"), TensorBoardLogger(root, name="tensorboard")]
    model = SimpleNamespace(export_dir=f"{root}/policy/{{run}}")
    version = place_run(loggers, model, None)
    assert all(lg.version == version for lg in loggers) and model.export_dir == f"{root}/policy/version_{version}"
    return version


def _place_after(barrier, root: str, out) -> None:
    barrier.wait()  # every process reserves at the same moment
    out.put(_place(root))


def test_two_fits_placed_before_either_writes_get_two_versions(tmp_path):
    # before: both took version_0 (the next free number, and nothing claimed it until the first log line)
    assert [_place(str(tmp_path)), _place(str(tmp_path))] == [0, 1]
    assert (tmp_path / "csv" / "version_1").is_dir() and (tmp_path / "tensorboard" / "version_1").is_dir()


def test_concurrent_reservations_get_distinct_versions(tmp_path):
    ctx = mp.get_context("fork")
    n = 6
    barrier, out = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_place_after, args=(barrier, str(tmp_path), out)) for _ in range(n)]
    for p in procs:
        p.start()
    versions = sorted(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert versions == list(range(n))


def test_reserve_version_skips_taken_numbers(tmp_path):
    (tmp_path / "a" / "version_0").mkdir(parents=True)
    assert reserve_version([tmp_path / "a", tmp_path / "b"], 0) == 1
    assert (tmp_path / "b" / "version_1").is_dir()
