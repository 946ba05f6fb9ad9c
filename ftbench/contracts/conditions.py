"""The condition types of FineTuneExperiment and FineTuneSweep status, named once.

Users name them in `kubectl wait --for=condition=Succeeded`, dashboards select on them, and the
operator, the sweep status and the report all write or read them, so each type is one constant here.
A condition's *reasons* are another vocabulary (`ftbench_operator.reasons`): `Running` is both a
condition type and a reason, and only the enum's name says which is meant.
"""

from __future__ import annotations

from enum import StrEnum


class ConditionType(StrEnum):
    # Both kinds.
    VALID = "Valid"  # the spec passed every rule (False: phase Invalid, with the rule's message)
    SPEC_CHANGE_IGNORED = "SpecChangeIgnored"  # an edit after acceptance: the accepted spec still runs
    # FineTuneExperiment.
    QUEUED = "Queued"  # Kueue holds the workload suspended
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    # Set with the results: False (reason NoiseFlagged) when status.results.noiseFlags is not empty, its
    # message saying what each flag means and what to do, so a flagged number is not read as clean.
    MEASUREMENT_CLEAN = "MeasurementClean"
    # Set on multi-node enableRoce runs only: False when the profile gives the pods no RDMA network, so
    # nobody reads a result as a RoCE measurement when NCCL could not use RoCE.
    ROCE_CONFIGURED = "RoceConfigured"
    # Set with the environment of a run in a Kubeflow TrainJob whose Trainer offered its status
    # endpoint: False (TrainerStatusUnreported) when rank 0's trainerStatus updates failed, so a Kubeflow
    # user who sees no progress on the TrainJob learns why here; training itself was not affected.
    TRAINER_STATUS_REPORTED = "TrainerStatusReported"
    # Set when the trainer ran the network preflight: False when enableRoce found no RoCE (reason
    # SocketTransport or RoceNotInEffect) or the peak busbw is far below the profile's
    # expectedBusBandwidthGbps (LowBusBandwidth).
    NETWORK_AS_EXPECTED = "NetworkAsExpected"
    # Set before anything is created when spec.run.oomPrecheck is not off: the memory prediction against
    # the GPU model's memory (PredictedToFit, PredictedBorderline, PredictedOOM), or Unknown with why.
    MEMORY_FITS = "MemoryFits"
    # FineTuneSweep.
    COMPLETE = "Complete"  # every point has ended (or the sweep stopped early); reason says how
