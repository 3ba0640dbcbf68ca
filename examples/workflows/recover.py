"""A failing shell command routed through `$result.outcome` instead of failing the run."""

from piwf_actors.workflows import compute, define_workflow, shell, switch

fallback = define_workflow(
    name="fallback",
    start_at="probe",
    nodes={
        "probe": shell(command="test -e /nonexistent/config && echo found", shell=True),
        "use_config": compute(run=lambda ctx: {"config": ctx.outputs["probe"]["stdout"].strip()}),
        "use_defaults": compute(run=lambda ctx: {"config": "defaults", "probe_exit_code": ctx.outputs["probe"]["exit_code"]}),
    },
    edges=[switch("probe", on="$result.outcome", cases={"ok": "use_config", "failed": "use_defaults"})],
)
