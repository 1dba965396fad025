"""step_files and the recorders across a resume: the rows of the steps a resumed fit runs again are dropped
when it starts (those only), and every step a checkpoint holds has its rows on disk when the checkpoint is saved."""

from types import SimpleNamespace

import pytest

from lit_rlvr.bench.recorder import SelectionRecorder
from lit_rlvr.report.group_records import GroupRecorder
from lit_rlvr.run.loggers import CSVLogger
from lit_rlvr.run.step_files import StepCellError, drop_rows_from_step, newest_step, restore_row, steps_to_run


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


def _trainer(tmp_path, max_steps=-1):
    return SimpleNamespace(loggers=[], log_dir=str(tmp_path), is_global_zero=True, global_step=2, max_steps=max_steps)


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


def test_a_resume_drops_only_the_rows_of_the_steps_it_runs_again(tmp_path):
    # a run stopped after its row of step 5, resumed at step 2 with max_steps 4: rows 4 and 5 are not run again
    path = tmp_path / "groups.csv"
    path.write_text("step,prompt_id\n" + "".join(f"{s},{s}\n" for s in range(6)))
    rec = GroupRecorder(path=str(path))
    rec.on_train_start(_trainer(tmp_path, max_steps=4), SimpleNamespace(steps_done=2))
    assert path.read_text() == "step,prompt_id\n0,0\n1,1\n4,4\n5,5\n"


def test_steps_to_run_counts_optimizer_steps_per_training_step():
    assert steps_to_run(2, 2, 6) == 6 and steps_to_run(2, 2, -1) is None and steps_to_run(4, 4, 4) == 4
    assert steps_to_run(2, 4, 9, iterations=2) == 5  # 5 optimizer steps left, 2 a step: 3 more steps at least
    assert steps_to_run(6, 6, 4) == 6  # past max_steps: nothing runs


METRICS = (
    "step,epoch,train/loss,val/pass@1\n"
    "0,,,0.25\n"  # the evaluation before training
    "0,0,1.0,\n"
    "0,0,,0.5\n"  # the evaluation after step 1, which a resume from its checkpoint (step 1) runs again
    "1,0,2.0,\n"
)


def test_the_evaluation_a_resume_runs_again_is_dropped_and_the_one_before_training_kept(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text(METRICS)
    assert drop_rows_from_step(path, 1, validation_at=0) == 2
    assert path.read_text() == "step,epoch,train/loss,val/pass@1\n0,,,0.25\n0,0,1.0,\n"


def test_a_hand_edited_step_cell_is_refused_naming_the_file_and_line_and_the_file_is_kept(tmp_path):
    path = tmp_path / "metrics.csv"
    text = METRICS.replace("\n1,0,2.0", "\none,0,2.0")
    path.write_text(text)
    for call in (lambda: drop_rows_from_step(path, 1), lambda: newest_step(path)):
        with pytest.raises(StepCellError, match=rf"{path} line 5: the step cell is 'one', not a step number"):
            call()
    assert path.read_text() == text


def test_the_row_a_kill_lost_after_its_checkpoint_is_written_once(tmp_path):
    logger = CSVLogger(str(tmp_path), name="csv", version=0)
    logger.log_metrics({"train/loss": 1.0, "epoch": 0}, step=0)
    logger.save()
    path = tmp_path / "csv" / "version_0" / "metrics.csv"
    trainer = SimpleNamespace(loggers=[logger])
    row = {"step": 1, "metrics": {"train/loss": 2.0, "epoch": 0}}
    assert restore_row(trainer, row, path)
    assert not restore_row(trainer, row, path)  # the file has it now: not twice
    assert path.read_text().splitlines() == ["epoch,step,train/loss", "0,0,1.0", "0,1,2.0"]
