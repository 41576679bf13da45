"""benchmarks/test_times.py: the per-file table sums a suite run's JUnit XML by file, largest first, and an unreadable
or empty file is refused in one line."""

from __future__ import annotations

import pytest

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="3">
<testcase classname="tests.test_a" name="test_x" time="2.5"/>
<testcase classname="tests.test_b" name="test_y[fp32]" time="10.0"/>
<testcase classname="tests.test_a" name="test_z" time="1.0"/>
</testsuite></testsuites>"""


def test_test_times_sums_each_files_tests_largest_file_first(tmp_path):
    from benchmarks.test_times import per_file, read_junit
    (tmp_path / "j.xml").write_text(JUNIT)
    cases = read_junit(tmp_path / "j.xml")
    assert [c["file"] for c in cases] == ["test_a.py", "test_b.py", "test_a.py"]
    assert per_file(cases) == [{"file": "test_b.py", "tests": 1, "seconds": 10.0},
                               {"file": "test_a.py", "tests": 2, "seconds": 3.5}]


@pytest.mark.parametrize("text", ["not xml", "<testsuites></testsuites>"])
def test_test_times_refuses_a_file_that_is_not_a_suite_run(tmp_path, text):
    from benchmarks.test_times import read_junit
    (tmp_path / "j.xml").write_text(text)
    with pytest.raises(SystemExit, match="test_times: .*j.xml"):
        read_junit(tmp_path / "j.xml")
