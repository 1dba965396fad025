"""Sources: real reasoning-gym generation and real local files through `datasets`."""

import json

import pytest

from lit_rlvr.data import VAL_ID_OFFSET, HFDatasetSource, PromptRecord, ReasoningGymSource

ONE_DIGIT = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


# --------------------------------------------------------------- reasoning-gym
def test_reasoning_gym_splits_are_disjoint_dense_and_pinned():
    src = ReasoningGymSource(task_config=ONE_DIGIT, train_size=300, val_size=32, seed=42)
    train, val = src.load("train"), src.load("validation")
    assert len(train) == 300 and len(val) == 32
    assert [r.id for r in train] == list(range(300))  # dense train ids
    assert [r.id for r in val] == [VAL_ID_OFFSET + i for i in range(32)]
    # 2 one-digit terms have a small question space (~1.3k): overlap would be likely, dedupe removes it
    assert not {r.question for r in train} & {r.question for r in val}
    # reasoning-gym basic_arithmetic, seed 42: entry 0 is the first validation prompt,
    # the train split starts at entry val_size = 32
    assert val[0].question == "Calculate -5 * -6." and val[0].answer == "30"
    assert train[0].question == "Calculate 0 - 2." and train[0].answer == "-2"
    assert train[0].metadata["source_dataset"] == "basic_arithmetic"
    assert train[0].metadata["source_index"] == 32
    assert train[0].metadata["question"] == "Calculate 0 - 2."
    assert isinstance(train[0], PromptRecord)


def test_reasoning_gym_is_deterministic_per_seed():
    a = ReasoningGymSource(task_config=ONE_DIGIT, train_size=50, val_size=8, seed=3)
    b = ReasoningGymSource(task_config=ONE_DIGIT, train_size=50, val_size=8, seed=3)
    c = ReasoningGymSource(task_config=ONE_DIGIT, train_size=50, val_size=8, seed=4)
    assert a.load("train") == b.load("train") and a.load("validation") == b.load("validation")
    assert [r.question for r in a.load("train")] != [r.question for r in c.load("train")]


def test_reasoning_gym_mixes_tasks_with_per_task_config():
    src = ReasoningGymSource(
        ["basic_arithmetic", "chain_sum"], task_config={"chain_sum": ONE_DIGIT}, train_size=20, val_size=4, seed=7
    )
    train, val = src.load("train"), src.load("validation")
    assert len(train) == 40 and len(val) == 8
    assert [r.metadata["source_dataset"] for r in val] == ["basic_arithmetic"] * 4 + ["chain_sum"] * 4
    assert val[4].question == "State the final answer to the following arithmetic problem: 6 + 0 =" and val[4].answer == "6"
    # basic_arithmetic ran with its defaults (several terms), chain_sum with the one-digit config
    assert val[0].question == "Calculate ( -6 + -77 - 8 + -38 )." and val[0].answer == "-129"
    assert train[20].metadata == {
        "source_dataset": "chain_sum", "source_index": 4, "num_terms": 2, "num_digits": 1, "expression": "7 + 8",
        "difficulty": {"num_terms": (2, 2), "num_digits": (1, 1)},
        "question": "State the final answer to the following arithmetic problem: 7 + 8 =", "part": "chain_sum",
    }
    assert not {r.question for r in train} & {r.question for r in val}


def test_reasoning_gym_mixes_one_dataset_under_two_configs_with_sizes_per_part():
    """``name@label`` entries: one dataset twice with its own config and sizes; no question in two places."""
    easy = {**ONE_DIGIT, "operators": ["+"], "allow_parentheses": False, "allow_negation": False}
    learn = {**easy, "max_digits": 2}
    tasks = ["basic_arithmetic@learn", "products", "basic_arithmetic@easy"]
    src = ReasoningGymSource(
        tasks, task_config={"basic_arithmetic@learn": learn, "products": {"min_digits": 2, "max_digits": 3},
                            "basic_arithmetic@easy": easy},
        train_size={"basic_arithmetic@learn": 6, "products": 4, "basic_arithmetic@easy": 30},
        val_size={"basic_arithmetic@learn": 5, "products": 3, "basic_arithmetic@easy": 40}, seed=42,
    )
    train, val = src.load("train"), src.load("validation")
    assert [r.metadata["part"] for r in train] == ["basic_arithmetic@learn"] * 6 + ["products"] * 4 + ["basic_arithmetic@easy"] * 30
    assert [r.metadata["part"] for r in val] == ["basic_arithmetic@learn"] * 5 + ["products"] * 3 + ["basic_arithmetic@easy"] * 40
    assert {r.metadata["source_dataset"] for r in train} == {"basic_arithmetic", "products"}
    assert all(" * " in r.question for r in train[6:10])  # products
    easy_q = [r.question for r in train[10:]]
    assert all(len(r.answer) <= 2 for r in train[10:])  # two one-digit terms: at most 18
    # no train question of a part is a held-out question of any part, nor a train question of an earlier part
    assert not {r.question for r in train} & {r.question for r in val}
    assert not set(easy_q) & {r.question for r in train[:10]}
    assert src.dropped_overlap == 0 and len(train) == 40
    assert [r.id for r in train] == list(range(40))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"tasks": "no_such_task"}, "no_such_task"),
        ({"tasks": ["chain_sum", "chain_sum"]}, "twice"),
        ({"tasks": ["chain_sum"], "task_config": {"chain_sum": {}, "basic_arithmetic": {}}}, "basic_arithmetic"),
        ({"task_config": {"seed": 1}}, "seed"),
        ({"tasks": ["basic_arithmetic@a", "basic_arithmetic@a"]}, "twice"),
        ({"tasks": ["no_such_task@a"]}, "no_such_task"),
        ({"tasks": ["chain_sum@a", "chain_sum@b"], "train_size": {"chain_sum@a": 4}}, "every task entry"),
        ({"tasks": ["chain_sum@a"], "val_size": {"chain_sum@a": -1}}, "val_size"),
        ({"train_size": 0}, "train_size"),
    ],
)
def test_reasoning_gym_rejects_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ReasoningGymSource(**kwargs)


def test_unknown_split_rejected():
    src = ReasoningGymSource(task_config=ONE_DIGIT, train_size=5, val_size=2)
    with pytest.raises(ValueError, match="test"):
        src.load("test")


# ------------------------------------------------------------------ local files
def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_local_jsonl_missing_answer_names_file_row_and_field(tmp_path):
    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(6)]
    del rows[3]["answer"]  # the 4th row (line 4) has no answer key at all
    p = _write_jsonl(tmp_path / "bad.jsonl", rows)
    src = HFDatasetSource(p, val_split=None, val_size=1)
    with pytest.raises(ValueError) as e:
        src.load("train")
    msg = str(e.value)
    assert "bad.jsonl', line 4: field 'answer' is missing" in msg


def test_local_jsonl_empty_prompt_rejected(tmp_path):
    rows = [{"question": "q0", "answer": "0"}, {"question": "  ", "answer": "1"}]
    p = _write_jsonl(tmp_path / "empty.jsonl", rows)
    with pytest.raises(ValueError, match=r"empty.jsonl', line 2: field 'question' is empty"):
        HFDatasetSource(p, val_split=None, val_size=1).load("train")


GSM8K_ROW = {
    "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
    "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
}


def test_answer_regex_extracts_gsm8k_final_answer(tmp_path):
    train = _write_jsonl(tmp_path / "train.jsonl", [GSM8K_ROW, {"question": "1+1?", "answer": "1+1=2\n#### 2"}])
    test = _write_jsonl(tmp_path / "test.jsonl", [{"question": "2+3?", "answer": "so\n#### 5"}])
    src = HFDatasetSource(train, val_split=test, answer_regex=r"#### (.*)$")
    tr, va = src.load("train"), src.load("validation")
    assert [r.answer for r in tr] == ["72", "2"]
    assert tr[0].question == GSM8K_ROW["question"]
    assert tr[0].metadata["raw_answer"] == GSM8K_ROW["answer"]
    assert [(r.id, r.answer) for r in va] == [(VAL_ID_OFFSET, "5")]


def test_answer_regex_no_match_names_row(tmp_path):
    p = _write_jsonl(tmp_path / "g.jsonl", [GSM8K_ROW, GSM8K_ROW, {"question": "x", "answer": "no marker"}])
    with pytest.raises(ValueError, match=r"g.jsonl', line 3: field 'answer' does not match"):
        HFDatasetSource(p, val_split=None, val_size=1, answer_regex=r"#### (.*)$").load("train")


def test_val_carved_from_train_is_seeded_and_disjoint(tmp_path):
    rows = [{"problem": f"what is {i}+{i}?", "solution": str(2 * i)} for i in range(20)]
    p = _write_jsonl(tmp_path / "d.jsonl", rows)
    kw = dict(val_split=None, val_size=5, prompt_field="problem", answer_field="solution")
    a, b = HFDatasetSource(p, seed=0, **kw), HFDatasetSource(p, seed=0, **kw)
    assert len(a.load("train")) == 15 and len(a.load("validation")) == 5
    assert a.load("validation") == b.load("validation")
    assert [r.id for r in a.load("train")] == list(range(15))
    assert not {r.question for r in a.load("train")} & {r.question for r in a.load("validation")}
    assert a.load("train")[0].metadata["problem"] == a.load("train")[0].question
    c = HFDatasetSource(p, seed=1, **kw)
    assert [r.question for r in c.load("validation")] != [r.question for r in a.load("validation")]


def test_val_split_drops_train_duplicates_and_reads_csv(tmp_path):
    (tmp_path / "train.csv").write_text("question,answer\nq0,0\nq1,1\nq2,2\n")
    (tmp_path / "test.csv").write_text("question,answer\nq1,1\n")
    src = HFDatasetSource(str(tmp_path / "train.csv"), val_split=str(tmp_path / "test.csv"))
    assert [(r.id, r.question, r.answer) for r in src.load("train")] == [(0, "q0", "0"), (1, "q2", "2")]
    assert src.dropped_overlap == 1


def test_missing_column_and_bad_split_are_explained(tmp_path):
    p = _write_jsonl(tmp_path / "d.jsonl", [{"prompt": "q", "answer": "a"}] * 3)
    with pytest.raises(ValueError, match=r"no column 'question' \(`prompt_field`\)"):
        HFDatasetSource(p, val_split=None, val_size=1).load("train")
    with pytest.raises(ValueError, match="val_split"):
        HFDatasetSource(p, prompt_field="prompt").load("train")  # default val_split="test" is not in a file
    with pytest.raises(ValueError, match="val_size"):
        HFDatasetSource(p, val_split=None)


def test_builder_with_data_files(tmp_path):
    train = _write_jsonl(tmp_path / "a.jsonl", [{"question": "q0", "answer": "0"}, {"question": "q1", "answer": "1"}])
    test = _write_jsonl(tmp_path / "b.jsonl", [{"question": "q9", "answer": "9"}])
    src = HFDatasetSource("json", data_files={"train": train, "test": test})
    assert [r.question for r in src.load("train")] == ["q0", "q1"]
    assert [r.question for r in src.load("validation")] == ["q9"]


# ------------------------------------------------- bad files: each error names the file and the line
def _bad_file(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _load_error(path, **kw) -> str:
    with pytest.raises(ValueError) as e:
        HFDatasetSource(path, val_split=None, val_size=1, **kw).load("train")
    return str(e.value)


@pytest.mark.parametrize("data", [b"", b"\n  \n"], ids=["zero-bytes", "blank-lines"])
def test_empty_jsonl_names_the_file(tmp_path, data):
    # before: a bare StopIteration from datasets' json builder
    msg = _load_error(_bad_file(tmp_path, "empty.jsonl", data))
    assert "empty.jsonl" in msg and "empty" in msg


def test_non_utf8_byte_names_file_line_and_fix(tmp_path):
    # before: UnicodeDecodeError with no file or row
    good = b'{"question": "q", "answer": "1"}\n'
    msg = _load_error(_bad_file(tmp_path, "latin.jsonl", good * 2 + b'{"question": "caf\xe9", "answer": "2"}\n'))
    assert "latin.jsonl" in msg and "line 3" in msg and "UTF-8" in msg


def test_non_json_line_names_file_and_line(tmp_path):
    # before: datasets.exceptions.DatasetGenerationError, the line ~100 lines up the traceback
    lines = [json.dumps({"question": f"q{i}", "answer": str(i)}) for i in range(300)]
    lines[150] = '{"question": "oops", answer: 3}'
    msg = _load_error(_bad_file(tmp_path, "d.jsonl", ("\n".join(lines) + "\n").encode()))
    assert "d.jsonl" in msg and "line 151" in msg and "not JSON" in msg


def test_jsonl_row_that_is_not_an_object_names_the_line(tmp_path):
    msg = _load_error(_bad_file(tmp_path, "d.jsonl", b'{"question": "q", "answer": "1"}\n[1, 2]\n'))
    assert "d.jsonl" in msg and "line 2" in msg and "object" in msg


def test_missing_field_counts_lines_1_based_with_blank_lines(tmp_path):
    data = b'{"question": "q0", "answer": "0"}\n\n{"question": "q1"}\n'
    msg = _load_error(_bad_file(tmp_path, "d.jsonl", data))
    assert "d.jsonl', line 3: field 'answer' is missing" in msg


def test_json_list_file_names_row_and_bad_document_names_line(tmp_path):
    rows = json.dumps([{"question": "q0", "answer": "0"}, {"question": "", "answer": "1"}], indent=1).encode()
    assert "d.json', row 2: field 'question' is empty" in _load_error(_bad_file(tmp_path, "d.json", rows))
    broken = _bad_file(tmp_path, "e.json", b'[\n{"question": "q0", "answer": "0"},\n{"question": }\n]\n')
    msg = _load_error(broken)
    assert "e.json" in msg and "line 3" in msg


def test_csv_empty_and_non_utf8_name_the_file(tmp_path):
    assert "a.csv" in _load_error(_bad_file(tmp_path, "a.csv", b""))
    msg = _load_error(_bad_file(tmp_path, "b.csv", b"question,answer\nq0,0\nq\xff,1\n"))
    assert "b.csv" in msg and "line 3" in msg and "UTF-8" in msg


def test_bad_val_file_and_data_files_are_named(tmp_path):
    train = _write_jsonl(tmp_path / "train.jsonl", [{"question": f"q{i}", "answer": str(i)} for i in range(3)])
    val = _bad_file(tmp_path, "val.jsonl", b'{"question": "v", "answer": "1"}\nnot json\n')
    with pytest.raises(ValueError, match=r"val.jsonl', line 2"):
        HFDatasetSource(train, val_split=val).load("train")
    with pytest.raises(ValueError, match=r"val.jsonl', line 2"):
        HFDatasetSource("json", data_files={"train": train, "test": val}).load("train")
