"""The Train tab: a SpecForge fine-tune on the host, watched as it learns and judged before a restart.

The head line says the training's state, step, ETA, loss and learning rate; traps (NaN, OOM, vocab mapping, a
resume that restarted) are said under it. Three charts: per-position accuracy by step, the accept length it
implies at the serving profile's steps against the break-even, and the loss. The checkpoints table has each
checkpoint's predicted accept length and tok/s with their intervals (``backend.train.training.predictions``, through
the advisor's cost model from this host's runs) beside what a bench of it measured. Keys: start, stop, resume,
serve the highlighted checkpoint (exporting it first when needed; asking first when a server runs, which it
stops), bench the running server, next training. The training's parsed records come from the host
(``train.follow``); the predictions are computed on the App's history thread, never on the event loop.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.timer import Timer
from textual.widgets import DataTable, Static

from backend.errors import SpecdeckError
from backend.history import History, run_id_of, sync_from_host
from backend.jobs import JobInfo, get_job
from backend.measure import judge
from backend.serve import server_status
from backend.serve.server import Server
from backend.train import training
from backend.train.records import TrainRecord, TrainSummary
from backend.train.training import CheckpointRow
from tui.messages import ConnectionChanged
from tui.screens.confirm import ConfirmScreen
from tui.screens.pane import ShellPane
from tui.widgets.benchbar import BenchBar
from tui.widgets.columns import fit_table
from tui.widgets.traincharts import AcceptChart, AccuracyChart, LossChart

CHECKPOINT_COLUMNS = ("checkpoint", "step", "accept (pred)", "tok/s (pred)", "vs baseline", "measured", "servable")
# By priority where the pane is narrow: the step is in the checkpoint's name already.
CHECKPOINT_PRIORITY = ("checkpoint", "accept", "tok/s", "measured", "servable", "vs baseline", "step")
CHECKPOINTS_EVERY_S = 3.0  # while a training runs: new checkpoints appear at its save interval

if TYPE_CHECKING:
    from backend.train.predict import Basis


def _servable(row: CheckpointRow) -> str:
    """The servable column: refused (another user could have put it there: s says why), yes, or export first."""
    return "refused" if row.untrusted else "yes" if row.servable else "export first"


def _range(value: float | None, low: float | None, high: float | None, digits: int) -> str:
    if value is None or low is None or high is None:
        return "—"
    return f"{value:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


class TrainPane(ShellPane):
    """The Train tab body; ``name`` is the training shown, ``train``/``evals`` its records so far."""

    KEYS_WIDGET = "#train-checkpoints"

    DEFAULT_CSS = """
    TrainPane { padding: 0 1; }
    TrainPane #train-head { height: 1; }
    TrainPane #train-traps { height: auto; max-height: 4; color: $warning; }
    TrainPane #train-charts { height: 1fr; min-height: 10; }
    TrainPane #train-charts > * { width: 1fr; }
    TrainPane #train-basis { height: auto; color: $text-muted; }
    TrainPane #train-checkpoints { height: 9; }
    """

    BINDINGS = [
        Binding("s", "start", "Start", id="train.start", tooltip="Start the training on the host"),
        Binding("x", "stop", "Stop", id="train.stop", tooltip="Stop the training (its checkpoints stay)"),
        Binding("u", "resume", "Resume", id="train.resume", tooltip="Resume the training from its newest checkpoint"),
        Binding(
            "v",
            "serve",
            "Serve",
            id="train.serve",
            tooltip="Serve the highlighted checkpoint (asks before it stops a server)",
        ),
        Binding("b", "bench", "Bench", id="train.bench", tooltip="Bench the running server and record it"),
        Binding("n", "next_training", "Next", id="train.next", tooltip="Show the next configured training"),
        Binding("f5", "refresh", "Refresh", id="train.refresh", tooltip="Read the training and its checkpoints again"),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.name_: str | None = None
        self.job: JobInfo | None = None
        self.summary = TrainSummary()
        self.train: list[TrainRecord] = []
        self.evals: list[TrainRecord] = []
        self.rows: list[CheckpointRow] = []
        self._cells: list[list[str]] = []  # the checkpoints table's whole rows (``rows`` as text)
        self.basis: Basis | None = None
        self._timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="train-head", markup=False)
        yield Static(id="train-traps", markup=False)
        with Horizontal(id="train-charts"):
            yield AccuracyChart(id="train-accuracy")
            yield AcceptChart(id="train-accept")
            yield LossChart(id="train-loss")
        yield Static(id="train-basis", markup=False)
        yield DataTable(id="train-checkpoints", cursor_type="row", zebra_stripes=True)
        yield BenchBar(
            lambda: self.app.yardstick(), lambda server: run_id_of(self.app.connection.host.name, server.id),
            id="train-bench",
        )  # fmt: skip

    def on_mount(self) -> None:
        self._fill_checkpoints()
        names = sorted(self.app.settings.trainings)
        self.name_ = names[0] if names else None
        self._draw()

    def on_connection_changed(self, message: ConnectionChanged) -> None:
        if message.connected and self.name_:
            self._follow()

    @property
    def steps(self) -> int:
        if self.name_ is None:
            return 3
        t = training.get_training(self.app.settings, self.name_)
        return training.profile_of(self.app.settings, t).steps or 3

    # --- following the host ------------------------------------------------------------------------------------

    @work(group="train-follow", exclusive=True, exit_on_error=False, description="follow the training")
    async def _follow(self) -> None:
        conn, name = self.app.connection, self.name_
        if name is None or not conn.connected:
            return
        self.train, self.evals, self.summary = [], [], TrainSummary()
        found = await training.jobs_of(conn, name)
        self.job = max(found, key=lambda j: j.started or 0) if found else None
        self._draw()
        await self._load_checkpoints()
        if self.job is None:
            return
        self._arm()
        async for batch in training.follow(conn, self.job.id):
            for rec in batch.records:
                (self.evals if rec.kind == "eval" else self.train).append(rec)
            self.summary = batch.summary
            self._draw()
        self.job = await get_job(conn, self.job.id)
        self._draw()
        await self._load_checkpoints()

    def _arm(self) -> None:
        if self._timer is None:
            self._timer = self.set_timer(CHECKPOINTS_EVERY_S, self._tick)

    def _tick(self) -> None:
        self._timer = None
        if self.job is not None and self.job.active:
            self._checkpoints_worker()

    @work(group="train-checkpoints", exclusive=True, exit_on_error=False, description="read the checkpoints")
    async def _checkpoints_worker(self) -> None:
        await self._load_checkpoints()
        self._arm()

    async def _load_checkpoints(self) -> None:
        conn, name = self.app.connection, self.name_
        if name is None or not conn.connected:
            return
        found = await training.checkpoint_list(conn, name)
        ref, settings, host = self.app.settings.reference, self.app.settings, self.app.host_config.name

        def read(history: History):
            runs = history.runs(host)
            return training.predictions(
                settings, name, found, runs, history.yardstick(ref.baseline_tok_s, ref.cycle_ms)
            )

        self.rows, self.basis = await self.app.history.query(read)
        self._show_checkpoints()

    # --- drawing -----------------------------------------------------------------------------------------------

    def _draw(self) -> None:
        head = self.query_one("#train-head", Static)
        if self.name_ is None:
            head.update("no training configured: add [trainings.NAME] to the config (the sandbox has k25-ft)")
            return
        s = self.summary
        state = self.job.state if self.job else "not started (s starts it)"
        parts = [f"{self.name_}: {state}"]
        if s.step is not None:
            total = s.total_steps
            parts.append(f"step {s.step}" + (f"/{total}" if total else ""))
            parts.append(training.eta_text(s.eta_s) if self.job and self.job.active else "")
            if s.loss is not None:
                parts.append(f"loss {s.loss:.3f}")
            if s.lr:
                parts.append(f"lr {s.lr:.1e}")
            if s.samples_s:
                parts.append(f"{s.samples_s:.0f} samples/s")
        head.update(" · ".join(p for p in parts if p))
        traps = [f"! {t.message}" for t in s.traps]
        if self.job is not None and self.job.state == "failed" and self.job.reason:
            traps.append(f"! failed: {self.job.reason}")
        traps += [f"· {note}" for note in s.notes]
        self.query_one("#train-traps", Static).update("\n".join(traps))
        line = (
            self.basis.break_even(self.steps)
            if self.basis is not None
            else judge.break_even(self.app.settings.reference.cycle_ms, self.app.baseline.tok_s)
        )
        self.query_one(AccuracyChart).show(self.train, self.evals)
        self.query_one(AcceptChart).show(self.train, self.steps, line)
        self.query_one(LossChart).show(self.train)

    def _show_checkpoints(self) -> None:
        cells = []
        for row in self.rows:
            mark = " (best)" if row.best else ""
            measured = row.measured_tok_s
            cells.append([
                row.name + mark, str(row.step),
                _range(row.predicted_accept_len, row.predicted_accept_len_low, row.predicted_accept_len_high, 2),
                _range(row.predicted_tok_s, row.predicted_tok_s_low, row.predicted_tok_s_high, 1),
                row.versus_baseline or "—",
                "—" if measured is None else f"{measured:.1f} tok/s", _servable(row),
            ])  # fmt: skip
        self._cells = cells
        self._fill_checkpoints()
        basis = self.basis
        if basis is None:
            text = "no checkpoint yet" if not self.rows else "no accuracy logged before the checkpoints"
        else:
            text = training.basis_line(basis, self.steps)
        self.query_one("#train-basis", Static).update(text)
        self._draw()

    def _fill_checkpoints(self) -> None:
        """The checkpoints table with the columns that fit the pane's width (by priority)."""
        room = (self.content_region.width or self.app.size.width) - 2  # the table's scrollbar and border
        keys = [row.name for row in self.rows]
        fit_table(self.query_one("#train-checkpoints", DataTable), CHECKPOINT_COLUMNS, self._cells, room,
                  CHECKPOINT_PRIORITY, keys)  # fmt: skip

    def on_resize(self) -> None:
        self._fill_checkpoints()

    def current_checkpoint(self) -> str | None:
        table = self.query_one("#train-checkpoints", DataTable)
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    # --- actions -------------------------------------------------------------------------------------------

    def _ready(self) -> bool:
        if self.name_ is None:
            self.app.notify("no training configured: add [trainings.NAME] to the config", severity="warning")
            return False
        if not self.app.connection.connected:
            self.app.notify(f"{self.app.host_config.name} is not connected", severity="error")
            return False
        return True

    def action_start(self) -> None:
        if self._ready():
            self._start(False)

    def action_resume(self) -> None:
        if self._ready():
            self._start(True)

    @work(group="train-start", exclusive=True, exit_on_error=False, description="start the training")
    async def _start(self, resume: bool) -> None:
        assert self.name_ is not None
        job, warnings = await training.start(self.app.connection, self.app.settings, self.name_, resume=resume)
        for warning in warnings:
            self.app.notify(warning, severity="warning", timeout=15)
        self.app.notify(f"training {self.name_} {'resumed' if resume else 'started'} (job {job.id})")
        self._follow()

    def action_stop(self) -> None:
        if self._ready():
            self._stop()

    @work(group="train-stop", exclusive=True, exit_on_error=False, description="stop the training")
    async def _stop(self) -> None:
        assert self.name_ is not None
        out = await training.stop(self.app.connection, self.name_)
        self.app.notify(f"training {self.name_} stopped (job {out.job.id}); its checkpoints stay")

    def action_serve(self) -> None:
        if not self._ready():
            return
        name = self.current_checkpoint()
        row = next((r for r in self.rows if r.name == name), None)
        if row is None:
            self.app.notify("no checkpoint to serve yet", severity="warning")
            return
        self._ask_serve(row)

    @work(group="train-serve-ask", exclusive=True, exit_on_error=False, description="look for a running server")
    async def _ask_serve(self, row: CheckpointRow) -> None:
        """Serve at once, or ask first when a server runs: serving the checkpoint stops it."""
        settings = self.app.settings
        assert self.name_ is not None  # a checkpoint row is a shown training's
        profile = training.profile_of(settings, training.get_training(settings, self.name_))
        async with Server(settings, self.app.connection) as server:
            current = await server.current(profile)
        if not current.running:
            self._serve(row)
            return
        question = (
            f"Stop {server_status.running_text(current, time.time())} and serve {row.name} with {profile.name}'s "
            "numbers? Loading the weights and capturing CUDA graphs again takes minutes on a large model."
        )

        def answered(yes: bool | None) -> None:
            if yes:
                self._serve(row)

        self.app.push_screen(ConfirmScreen("Serve the checkpoint?", question, "Serve it", "Keep it running"), answered)

    @work(group="train-serve", exclusive=True, exit_on_error=False, description="serve the checkpoint")
    async def _serve(self, row: CheckpointRow) -> None:
        assert self.name_ is not None
        conn = self.app.connection
        if not row.servable and not row.untrusted:
            self.app.notify(f"exporting {row.name} for SGLang…")
        served = await training.serve(conn, self.app.settings, self.name_, row)
        await self._load_checkpoints()
        started = served.launched.status
        self.app.notify(f"serving {row.name} with {started.profile} (job {started.job}): starting")
        async with Server(self.app.settings, conn) as server:
            st = await server.wait(started)
        if st.state == "ready":
            self.app.notify(f"{row.name} is ready: b benches it")
        else:
            self.app.notify(f"{row.name}: the server {st.state}: {st.error or ''}", severity="error")

    def action_bench(self) -> None:
        if self._ready():
            self._bench()

    @work(group="train-bench-find", exclusive=True, exit_on_error=False, description="find the server")
    async def _bench(self) -> None:
        async with Server(self.app.settings, self.app.connection) as face:
            status = await face.here()
        server = await get_job(self.app.connection, status.job) if status.job else None
        self.query_one(BenchBar).toggle(server if status.state == "ready" else None)

    def on_bench_bar_finished(self, message: BenchBar.Finished) -> None:
        self._record()

    @work(group="train-record", exclusive=True, exit_on_error=False, description="record the bench")
    async def _record(self) -> None:
        try:
            await sync_from_host(self.app.history, self.app.connection)
        except SpecdeckError as exc:
            self.app.notify(f"the bench was not recorded: {exc}", severity="warning")
        await self._load_checkpoints()

    def action_next_training(self) -> None:
        names = sorted(self.app.settings.trainings)
        if not names:
            self.app.notify("no training configured", severity="warning")
            return
        i = names.index(self.name_) if self.name_ in names else -1
        self.name_ = names[(i + 1) % len(names)]
        self.rows, self.basis, self.job, self.summary, self.train, self.evals = [], None, None, TrainSummary(), [], []
        self._show_checkpoints()
        self._follow()

    def action_refresh(self) -> None:
        if self._ready():
            self._follow()
