"""The Live tab's built-in bench: ``toggle`` starts a bench of the running server (again: stops it), and the
bar says in one line how it goes and what it measured (hidden until there is something to say). A finished
bench posts ``BenchBar.Finished`` with its result, for what else the tab shows from it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from textual import work
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Static
from textual.worker import Worker

from backend.errors import OperationFailed
from backend.history import Yardstick
from backend.jobs import JobInfo
from backend.measure import judge
from backend.measure.bench import BenchPlan, BenchProgress, start_bench, stop_bench, summary_line, wait_result

if TYPE_CHECKING:
    from textual import getters

    from tui.app import SpecdeckApp


class BenchBar(Static):
    """One bench at a time; ``plan`` is what it sends, ``job`` the bench job while it runs."""

    if TYPE_CHECKING:  # the checker reads ``self.app`` as the panel (see tui.screens.pane)
        app = getters.app(SpecdeckApp)

    DEFAULT_CSS = """
    BenchBar { height: auto; color: $text-secondary; display: none; }
    BenchBar.-shown { display: block; }
    """

    text: reactive[str] = reactive("")

    class Finished(Message):
        """A bench of ``server`` ended with ``result`` (the load generator's summary record)."""

        def __init__(self, server: JobInfo, result: dict) -> None:
            super().__init__()
            self.server, self.result = server, result

    def __init__(
        self, yardstick: Callable[[], Awaitable[Yardstick]], run_of: Callable[[JobInfo], str | None], *,
        id: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(id=id, markup=False)
        self.yardstick = yardstick  # what the result is judged against, read when it comes
        self.run_of = run_of  # the History run of a server (the baseline's own reads = baseline)
        self.plan = BenchPlan()
        self.job: JobInfo | None = None
        self._stopping = False

    def watch_text(self, text: str) -> None:
        self.update(text)
        self.set_class(bool(text), "-shown")

    def clear(self) -> None:
        """Forget the last result (its server is gone); a bench that runs keeps its line."""
        if self.job is None:
            self.text = ""

    def toggle(self, server: JobInfo | None) -> None:
        """Bench ``server`` (a running serve job), or stop the bench that runs."""
        if self.job is not None:
            self._stop(self.job)
        elif server is None or server.state != "running":
            self.notify("no server is running to bench; start one on the Serve tab", severity="warning")
        else:
            self._run(server)

    @work(exclusive=True, group="live-bench", exit_on_error=False, description="run the bench")
    async def _run(self, server: JobInfo) -> None:
        conn = self.app.connection
        plan = self.plan
        scope = judge.bench_scope(plan.requests, plan.concurrency)
        sets = ", ".join(plan.domains or ()) or "built-in"
        prompts = f"{sets} prompts" + (", raw" if plan.raw else "")
        self.text = f"bench: starting {plan.requests} requests of {plan.max_tokens} tokens ({prompts}); {scope}"
        try:
            self.job = await start_bench(conn, server, self.plan)
            result = await wait_result(conn, self.job.id, self._progress)
            self.text = "bench: " + summary_line(result, await self.yardstick(), self.run_of(server))
            self.post_message(self.Finished(server, result))
        except OperationFailed:
            if not self._stopping:
                self.text = "bench: failed"
                raise
            self.text = "bench: stopped"
        finally:
            self.job, self._stopping = None, False

    def _progress(self, event: BenchProgress) -> None:
        self.text = f"bench: {event.done}/{event.total} requests"

    @work(group="live-bench-stop", exit_on_error=False, description="stop the bench")
    async def _stop(self, job: JobInfo) -> None:
        self._stopping = True
        await stop_bench(self.app.connection, job.id)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        self.app.report_worker(event.worker)  # worker messages do not bubble: failures go to the app's funnel
