"""Selection heatmaps: each (prompt, epoch) cell is its rolled-out outcome, else its last record."""

import numpy as np
import pandas as pd

from lit_rlvr.bench.report.heatmaps import STATUS_CODES, load_selection, selection_matrix


def test_a_rolled_out_outcome_wins_over_a_later_skip_in_its_epoch(tmp_path):
    p = tmp_path / "selection.csv"
    pd.DataFrame({
        "step": [0, 1, 0, 1, 2, 2],
        "epoch": [0, 0, 0, 0, 1, 1],
        "prompt_id": [7, 7, 9, 9, 7, 9],
        "status": ["easy", "skipped", "unused", "skipped", "hard", "effective"],
    }).to_csv(p, index=False)
    df = load_selection([p])
    assert list(df["code"]) == [STATUS_CODES[s] for s in ["easy", "skipped", "unused", "skipped", "hard", "effective"]]
    mat, epochs = selection_matrix(df, np.array([7, 9]))
    assert list(epochs) == [0, 1]
    # prompt 7, epoch 0: rolled out (easy) at step 0, skipped at step 1: easy; prompt 9 never rolled out in epoch 0: its last
    assert mat.tolist() == [[STATUS_CODES["easy"], STATUS_CODES["hard"]], [STATUS_CODES["skipped"], STATUS_CODES["effective"]]]


def test_epoch_defaults_to_the_step_without_an_epoch_column(tmp_path):
    p = tmp_path / "selection.csv"
    pd.DataFrame({"step": [0, 1], "prompt_id": [1, 1], "status": ["hard", "easy"]}).to_csv(p, index=False)
    assert list(load_selection([p])["epoch"]) == [0, 1]
