"""The bar shown while a dataset's tasks are fetched: repositories, tasks, bytes."""

from __future__ import annotations

from rich import filesize
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn


class FetchBar:
    """A rich progress bar on `console` (stderr when stdout carries JSON), shown only
    when there is something to fetch; a plain line per dataset without a terminal."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._progress: Progress | None = None
        self._task = None
        self._bytes = 0
        self._clones = 0
        self._cloned = 0

    def planned(self, repos: int, tasks: int, clones: int) -> None:
        if tasks == 0:
            return
        self._clones = clones
        commits = f", {clones} commits" if clones != repos else ""
        self._console.print(f"fetching {tasks} task{'s' if tasks != 1 else ''} from {repos} "
                            f"repositor{'ies' if repos != 1 else 'y'}{commits} into the "
                            "dataset cache")
        if not self._console.is_terminal:
            return
        self._progress = Progress(TextColumn("[cyan]fetching tasks"), BarColumn(),
                                  MofNCompleteColumn(), TextColumn("tasks •"),
                                  TextColumn("{task.fields[size]} •"),
                                  TextColumn("{task.fields[clones]} clones"),
                                  console=self._console, transient=True)
        self._task = self._progress.add_task("fetch", total=tasks, size="0 bytes",
                                             clones=f"0/{clones}")
        self._progress.start()

    def fetched(self, tasks: int, nbytes: int) -> None:
        self._bytes += nbytes
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, advance=tasks,
                                  size=filesize.decimal(self._bytes))

    def cloned(self) -> None:
        self._cloned += 1
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, clones=f"{self._cloned}/{self._clones}")

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._bytes:
            self._console.print(f"fetched {filesize.decimal(self._bytes)} of task files")
