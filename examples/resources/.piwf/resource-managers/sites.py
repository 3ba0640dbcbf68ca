"""A resource manager: one `build-site` run per generation of a site's spec, its output kept in the
site's status, and a finalizer that "unpublishes" the site (an at-most-once effect) when it is deleted."""

from piwf_actors.workflows import define_resource_manager


def reconcile(ctx):
    run = ctx.workflows.ensure("build-site", ctx.spec, key=f"build-{ctx.generation}")
    if run["status"] in ("failed", "cancelled"):
        return {"result": "error", "error": f"build {run['run_id']} {run['status']}"}
    if run["status"] != "done":
        # Owned runs wake their resource when they end; the requeue is only a safety net.
        return {"result": "requeue_after", "after_s": 60, "status_patch": {"phase": "building"},
                "finalizers": ["sites/published"]}
    url = ctx.effect(f"publish-{ctx.generation}", lambda: {"url": f"https://sites.example/{ctx.key}"})["url"]
    return {"result": "done", "finalizers": ["sites/published"],
            "status_patch": {"phase": "published", "url": url, "pages": run["output"]["pages"]}}


def finalize(ctx):
    ctx.effect("unpublish", lambda: {"removed": ctx.status.get("url")})
    return {"result": "done", "finalizers": [], "status_patch": {"phase": "unpublished"}}


sites = define_resource_manager("sites", reconcile=reconcile, finalize=finalize, timeout_s=30)
