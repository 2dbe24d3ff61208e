"""`--progress-lines` (what `make test` passes): what runs while it runs, one line at a time, in place of dots.

pytest's own output under xdist is a row of dots that stops moving while the engine tests run (minutes
for the last 3% of the suite: it looked hung). With this option the controller prints instead

- for a test of tests/engine, a line when it starts, and for every test of tests/engine and tests/integration
  a line when it ends: its outcome, its seconds (set-up, call and teardown together), its name and worker;
- for tests/unit and tests/architecture (fast, many), one line per file once its tests ended: the counts and
  the seconds, and a line of its own for each test that did not pass.

The failures' tracebacks, the short summary (-ra) and --durations are pytest's own, as without the option.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass, field

import pytest

Status = tuple[str, str, str | tuple[str, dict[str, bool]]]  # category, letter, word (with its markup)
FILE_TIERS = ("tests/unit/", "tests/architecture/")  # summed per file
STARTS = ("tests/engine/",)  # a line when each test starts too


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--progress-lines", action="store_true", default=False,
                     help="one line per test as it ends (per file for unit tests), in place of dots")


@dataclass
class _Test:
    seconds: float = 0.0
    outcome: str = "passed"
    word: str = "PASSED"


@dataclass
class _File:
    counts: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0


class Progress:
    def __init__(self, reporter: pytest.TerminalReporter, config: pytest.Config) -> None:
        self.reporter = reporter
        self.config = config
        self.tests: dict[str, _Test] = {}
        self.files: dict[tuple[str, str], _File] = {}  # (worker, file) -> what ended there
        self.current: dict[str, str] = {}  # worker -> the file it runs
        self.total = 0  # tests collected
        self.ended = 0

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = len(session.items)  # without xdist

    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        self.total = max(self.total, len(ids))  # every worker collects every test

    @pytest.hookimpl(wrapper=True)
    def pytest_report_teststatus(self, report: pytest.TestReport) -> Generator[None, Status, Status]:
        """pytest's status with no letter: nothing is written for it, and the words of -ra stay."""
        category, _letter, word = yield
        return category, "", word

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        if nodeid.startswith(STARTS):
            self.reporter.write_line(f"{'':6} {'start':<7} {'':>8}  {nodeid}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        test = self.tests.setdefault(report.nodeid, _Test())
        test.seconds += report.duration
        if report.outcome != "passed" or (report.when == "call" and hasattr(report, "wasxfail")):
            category, _letter, word = self.config.hook.pytest_report_teststatus(report=report, config=self.config)
            text = word[0] if isinstance(word, tuple) else word
            if test.outcome == "passed" or report.outcome == "failed":
                test.outcome, test.word = category, str(text) or report.outcome.upper()
        if report.when == "teardown":
            self.ended += 1
            self._ended(report, self.tests.pop(report.nodeid))

    def _ended(self, report: pytest.TestReport, test: _Test) -> None:
        node = getattr(report, "node", None)  # xdist: the worker the report came from
        worker = str(node.gateway.id) if node is not None else ""
        name = report.nodeid
        where = f" [{worker}]" if worker else ""
        path = name.split("::")[0]
        if not path.startswith(FILE_TIERS):
            self._line(test.word, test.seconds, name + where)
            return
        if self.current.get(worker) not in (None, path):
            self._file_done(worker, self.current[worker])
        self.current[worker] = path
        done = self.files.setdefault((worker, path), _File())
        done.counts[test.outcome] += 1
        done.seconds += test.seconds
        if test.outcome not in ("passed", "skipped"):
            self._line(test.word, test.seconds, name + where)

    def _file_done(self, worker: str, path: str) -> None:
        done = self.files.pop((worker, path))
        counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(done.counts.items()))
        self._line("FILE", done.seconds, f"{path}: {counts}" + (f" [{worker}]" if worker else ""))

    def _line(self, word: str, seconds: float, text: str) -> None:
        done = f"[{100 * self.ended // self.total:>3}%]" if self.total else ""
        self.reporter.write_line(f"{done} {word:<7} {seconds:>7.1f}s  {text}")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self) -> None:
        if any(key in self.files for key in self.current.items()):
            self.reporter.write("\n")  # after pytest's closing [100%]
        for worker, path in sorted(self.current.items()):
            if (worker, path) in self.files:
                self._file_done(worker, path)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if config.getoption("progress_lines") and reporter is not None and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Progress(reporter, config), "buildctl-progress")
