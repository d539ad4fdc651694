"""``python -m trainer.cli.dashboard_main ARGS``: ``trainer dashboard`` in a lean process.

``trainer`` imports every command (the controller, the webhook, the plugins, FastAPI...), about
40 MB the dashboard never uses, and a process cannot give imported modules back. So
``trainer dashboard`` re-executes itself here (same process id, same arguments and output),
where only the dashboard's own modules are imported, and kubernetes_asyncio without its
generated API and model classes (:mod:`trainer.kube.lean`): the difference between holding
1,000 TrainJobs in under 100 MB or not (docs/dashboard.md, "Footprint")."""

from __future__ import annotations

from trainer.kube.lean import import_lean


def main() -> None:
    import_lean()
    # Imported only now, after the lean kubernetes_asyncio is in place.
    import typer  # noqa: PLC0415

    from trainer.cli import dashboard as dashboard_cmd  # noqa: PLC0415
    from trainer.cli.guard import GuardedGroup  # noqa: PLC0415
    from trainer.cli.helptext import HELP_MARKUP  # noqa: PLC0415
    from trainer.cli.pipes import closed_pipe_ends_quietly  # noqa: PLC0415

    app = typer.Typer(
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=HELP_MARKUP,
        cls=GuardedGroup,
    )
    app.command(name="dashboard")(dashboard_cmd.dashboard)
    with closed_pipe_ends_quietly():
        app(prog_name="trainer dashboard")


if __name__ == "__main__":
    main()
