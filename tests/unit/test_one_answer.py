"""Issue 44.1: `ftbench validate` (with the profile), `ftbench render` and the operator's start give
one answer. The operator validates with its profile and then renders (a render refusal is Invalid
NotRunnable); `ftbench render` does the same; so the property is that a spec validation passes on a
profile always renders on it, whatever the runtime, the cluster's features or its images."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftbench.api.profile import ClusterProfile, Features, catalog_for
from ftbench.api.validation import validate_spec_dict
from ftbench.contracts.enums import Runtime
from ftbench.render.manifests import render_experiment

from .strategies import wire_specs


@st.composite
def runnable_specs(draw: st.DrawFn) -> dict:
    """Specs that pass the spec's own rules more often than not, varied where a cluster decides:
    nodes, GPUs, trials and repeats, the runtime, a priority class, the attention kernel."""
    nodes, per_node = draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 8]))
    gpus = nodes * per_node
    run: dict = {"runtime": draw(st.sampled_from([r.value for r in Runtime]))}
    if draw(st.booleans()):
        run["priorityClassName"] = "high"
    spec = {
        "model": "llama3.1-8b", "modelMaxLength": 1024, "gpuModel": "NVIDIA-A100-SXM4-80GB",
        "numberNodes": nodes, "numberGpus": gpus, "batchSize": gpus * draw(st.integers(1, 2)),
        "experiment": draw(st.sampled_from(["finetune_lora_benchmark-v1.0.0", "finetune_full_stability-v1.0.0"])),
        "attentionImplementation": draw(st.sampled_from(["auto", "sdpa", "flash_attention_2"])), "run": run,
    }  # fmt: skip
    if nodes == 1 and draw(st.booleans()):
        spec["repeats"] = draw(st.integers(2, 3))
    return spec


profiles = st.builds(
    ClusterProfile,
    features=st.builds(Features, training_operator=st.booleans(), trainer_v2=st.booleans(), indexed_jobs=st.booleans()),
    runtime=st.sampled_from(list(Runtime)),
    flash_attention=st.booleans(),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.one_of(runnable_specs(), wire_specs()), profiles)
def test_what_validation_passes_renders_on_the_same_profile(raw: dict, profile: ClusterProfile) -> None:
    catalog = catalog_for(profile)
    report = validate_spec_dict(raw, catalog, profile=profile)
    if report.ok and report.spec is not None:
        render_experiment(report.spec, catalog, profile, name="x", namespace="ns")  # raises on a refusal


def test_the_cases_users_met_are_refused_by_validation_with_the_render_step_s_words() -> None:
    """Each passed `ftbench validate` and then ended Invalid (NotRunnable) in the operator."""
    base = {"model": "llama3.1-8b", "modelMaxLength": 1024, "gpuModel": "NVIDIA-A100-SXM4-80GB", "batchSize": 16}
    cases = [
        ({"numberGpus": 16, "numberNodes": 2, "run": {"runtime": "Job"}}, None, "runtime.job-one-node"),
        ({"numberGpus": 8, "experiment": "finetune_full_stability-v1.0.0", "run": {"runtime": "PyTorchJob"}}, None,
         "runtime.pytorchjob-one-trial"),
        ({"numberGpus": 8, "repeats": 3, "run": {"runtime": "PyTorchJob"}}, None, "runtime.pytorchjob-one-trial"),
        ({"numberGpus": 8, "attentionImplementation": "flash_attention_2"}, ClusterProfile(flash_attention=False),
         "profile.flash-attention"),
        ({"numberGpus": 16, "numberNodes": 2}, ClusterProfile(runtime=Runtime.JOB), "profile.runtime"),
        ({"numberGpus": 16, "numberNodes": 2}, ClusterProfile(features=Features(indexed_jobs=False)),
         "profile.runtime"),
    ]  # fmt: skip
    for extra, profile, rule in cases:
        profile = profile or ClusterProfile()
        report = validate_spec_dict({**base, **extra}, catalog_for(profile), profile=profile)
        assert [i.rule for i in report.issues] == [rule], (extra, report.summary())


def test_a_runtime_pinned_by_the_profile_is_not_offered_as_auto() -> None:
    """The fix names runtimes this cluster has: auto is no way out where the profile pins Job."""
    spec = {"model": "llama3.1-8b", "modelMaxLength": 1024, "gpuModel": "NVIDIA-A100-SXM4-80GB", "batchSize": 16,
            "numberGpus": 16, "numberNodes": 2}  # fmt: skip
    pinned = ClusterProfile(runtime=Runtime.JOB, features=Features(training_operator=True))
    (issue,) = validate_spec_dict(spec, catalog_for(pinned), profile=pinned).issues
    assert (
        "set spec.run.runtime to IndexedJob or PyTorchJob, or set spec.numberNodes to 1 and spec.numberGpus to at most 8"
        in issue.message
    )
    fixed = {**spec, "run": {"runtime": "IndexedJob"}}
    assert validate_spec_dict(fixed, catalog_for(pinned), profile=pinned).ok
