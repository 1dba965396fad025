"""step_files and the recorders across a resume: the rows of the steps a resumed fit runs again are dropped
when it starts, and every step a checkpoint holds has its rows on disk when the checkpoint is saved."""

from types import SimpleNamespace

from lit_rlvr.bench.recorder import SelectionRecorder
from lit_rlvr.group_records import GroupRecorder
from lit_rlvr.step_files import drop_rows_from_step


def test_rows_of_later_steps_are_dropped_and_the_rest_kept_byte_for_byte(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_bytes(b"a,step\r\n1,0\r\n2,1\r\n,\r\n3,2\r\n4,3\r\n")  # csv.DictWriter's endings, a row without a step
    assert drop_rows_from_step(path, 2) == 2
    assert path.read_bytes() == b"a,step\r\n1,0\r\n2,1\r\n,\r\n"
    assert drop_rows_from_step(path, 2) == 0 and drop_rows_from_step(tmp_path / "none.csv", 0) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.csv"]  # no temporary left


def test_a_file_without_a_step_column_is_left_alone(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    assert drop_rows_from_step(path, 0) == 0 and path.read_text() == "a,b\n1,2\n"


def _trainer(tmp_path):
    return SimpleNamespace(loggers=[], log_dir=str(tmp_path), is_global_zero=True)


def test_group_recorder_writes_at_a_checkpoint_and_drops_rerun_steps_on_resume(tmp_path):
    path = tmp_path / "groups.csv"
    rec = GroupRecorder(path=str(path), flush_every=100)
    rec._buffer = ["0,0,1,4,2,0.0,1.0", "1,0,2,4,0,0.0,0.0"]  # buffered, not yet written
    rec.on_save_checkpoint(_trainer(tmp_path), SimpleNamespace(steps_done=2), {})
    assert path.read_text().splitlines()[1:] == ["0,0,1,4,2,0.0,1.0", "1,0,2,4,0,0.0,0.0"]
    with open(path, "a") as f:
        f.write("2,0,3,4,4,1.0,1.0\n")  # a step after the checkpoint, written before the kill
    rec.on_train_start(_trainer(tmp_path), SimpleNamespace(steps_done=2))
    assert [line.split(",")[0] for line in path.read_text().splitlines()[1:]] == ["0", "1"]
    rec.on_train_start(_trainer(tmp_path), SimpleNamespace(steps_done=0))  # a fresh fit leaves the file alone
    assert len(path.read_text().splitlines()) == 3


def test_selection_recorder_does_the_same(tmp_path):
    path = tmp_path / "selection.csv"
    rec = SelectionRecorder(path=str(path))
    rec._buffer = ["0,0,1,effective", "1,0,1,hard"]
    rec.on_save_checkpoint(_trainer(tmp_path), SimpleNamespace(steps_done=2), {})
    with open(path, "a") as f:
        f.write("2,0,1,easy\n")
    rec.on_train_start(_trainer(tmp_path), SimpleNamespace(steps_done=2))
    assert path.read_text().splitlines() == ["step,epoch,prompt_id,status", "0,0,1,effective", "1,0,1,hard"]
