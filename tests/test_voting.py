"""Voting over hand-made candidates (lit_rlvr.voting): majority, weighted, ties, no answers."""

import pytest

from lit_rlvr.voting import answer_scores, vote_accuracy, vote_winners


def test_majority_vote_picks_the_most_frequent_answer():
    # "4" has 3 votes, "5" 2, "6" 1: "4" wins; "4" is correct, so the vote scores 1.
    answers = ["4", "5", "4", "6", "4", "5"]
    correct = [1, 0, 1, 0, 1, 0]
    assert vote_winners(answers) == ["4"]
    assert vote_accuracy(answers, correct) == 1.0
    # the same votes with "5" as the reference: the majority is wrong, the vote scores 0
    assert vote_accuracy(answers, [0, 1, 0, 0, 0, 1]) == 0.0


def test_weights_that_flip_the_majority():
    # Plain: "7" 3 votes against "8" 2 -> "7" (wrong), 0.
    # Weighted: "7" = 0.1 + 0.2 + 0.1 = 0.4, "8" = 0.9 + 0.8 = 1.7 -> "8" (correct), 1.
    answers = ["7", "8", "7", "8", "7"]
    correct = [0, 1, 0, 1, 0]
    weights = [0.1, 0.9, 0.2, 0.8, 0.1]
    assert vote_accuracy(answers, correct) == 0.0
    assert vote_winners(answers, weights) == ["8"]
    assert answer_scores(answers, weights) == pytest.approx({"7": 0.4, "8": 1.7})
    assert vote_accuracy(answers, correct, weights) == 1.0
    # weights that do not flip it: "7" = 0.5 * 3 = 1.5 > "8" = 0.6 * 2 = 1.2 -> still "7", 0.
    assert vote_accuracy(answers, correct, [0.5, 0.6, 0.5, 0.6, 0.5]) == 0.0


def test_a_tie_scores_the_expected_accuracy_of_a_random_tie_break():
    # "1" and "2" both have 2 votes; one of them is correct: 1/2.
    answers = ["1", "2", "2", "1"]
    correct = [1, 0, 0, 1]
    assert vote_winners(answers) == ["1", "2"]
    assert vote_accuracy(answers, correct) == 0.5
    # three-way tie with one correct: 1/3.
    assert vote_accuracy(["a", "b", "c"], [0, 1, 0]) == pytest.approx(1 / 3)
    # a weighted tie, equal up to float rounding: "x" = 0.1 + 0.2 = 0.30000000000000004, "y" = 0.3.
    assert vote_winners(["x", "x", "y"], [0.1, 0.2, 0.3]) == ["x", "y"]
    assert vote_accuracy(["x", "x", "y"], [1, 1, 0], [0.1, 0.2, 0.3]) == 0.5


def test_candidates_without_an_answer_do_not_vote():
    # None x3 cannot outvote "9" (one vote, correct): the vote is "9", 1.
    assert vote_accuracy([None, None, "9", None], [0, 0, 1, 0]) == 1.0
    assert vote_accuracy([None, None, "9", None], [0, 0, 1, 0], [0.9, 0.9, 0.1, 0.9]) == 1.0
    # all None: no answer, the vote scores 0 both ways, whatever the (impossible) correctness says.
    assert vote_winners([None, None]) == []
    assert vote_accuracy([None, None], [0, 0]) == 0.0
    assert vote_accuracy([None, None], [1, 1], [0.5, 0.5]) == 0.0
    assert vote_accuracy([], []) == 0.0


def test_an_answers_correctness_is_its_voters_mean_and_bad_inputs_fail():
    # "3" won with voters scored 1 and 0 (a reward that is not a function of the answer): 0.5.
    assert vote_accuracy(["3", "3", "4"], [1, 0, 0]) == 0.5
    with pytest.raises(ValueError, match="weights"):
        vote_accuracy(["1"], [1], [0.5, 0.5])
    with pytest.raises(ValueError, match=">= 0"):
        vote_winners(["1", "2"], [0.5, -0.1])
    with pytest.raises(ValueError, match="correctness"):
        vote_accuracy(["1", "2"], [1])
