"""The reasons (CamelCase, as in metav1.Condition) the operator writes into status and Events.

Docs and tests use these names; those of a trainer-reported outcome come from the outcome table
(`ftbench.contracts.outcomes`), so a reason is spelled in one place.
"""

from __future__ import annotations

from ftbench.api.prediction_report import PREDICTED_OOM_REASON
from ftbench.contracts.outcomes import OUTCOMES
from ftbench.contracts.results import REASON_TOO_FEW_TRAINED_ROWS, Outcome

RESULTS_RECORDED = OUTCOMES[Outcome.SUCCEEDED].status_reason
GPU_OOM = OUTCOMES[Outcome.GPU_OOM].status_reason
TRAINING_ERROR = OUTCOMES[Outcome.FAILED].status_reason
ROCE_NOT_IN_EFFECT = OUTCOMES[Outcome.NETWORK_UNFIT].status_reason
INVALID_SPEC = "InvalidSpec"
# Condition MemoryFits (spec.run.oomPrecheck): the prediction's verdict, or why there is none.
PREDICTED_OOM = PREDICTED_OOM_REASON
PREDICTED_TO_FIT = "PredictedToFit"
PREDICTED_BORDERLINE = "PredictedBorderline"
PREDICTOR_UNAVAILABLE = "PredictorUnavailable"
NO_GPU_MEMORY = "NoGpuMemory"
# The predictor counted the rows that train under the model's tokenizer: they cannot fill one optimizer step.
TOO_FEW_TRAINED_ROWS = REASON_TOO_FEW_TRAINED_ROWS
NOT_RUNNABLE = "NotRunnable"
HOST_OOM_KILLED = "OOMKilled"
EVICTED = "Evicted"
IMAGE_PULL = "ImagePullBackOff"
CONTAINER_CONFIG = "CreateContainerConfigError"
DEADLINE_EXCEEDED = "DeadlineExceeded"
CHILD_DELETED = "ChildDeleted"
CHILD_REJECTED = "ChildRejected"
CHILD_CONFLICT = "ChildConflict"
# A child name is still held by the children of a deleted experiment of the same name.
WAITING_FOR_PREDECESSOR = "WaitingForPredecessor"
UNKNOWN_WORKLOAD = "UnknownWorkload"
# status.acceptedSpec no longer parses (an operator upgrade that tightened the API): the run is not followed.
UNREADABLE_SPEC = "UnreadableSpec"
MISSING_DEPENDENCY = "MissingDependency"
BACKOFF_LIMIT = "BackoffLimitExceeded"
POD_FAILED = "PodFailed"
NO_RESULT = "NoResult"
WORKLOAD_FAILED = "WorkloadFailed"
PENDING = "Pending"
NO_PODS = "NoPods"
FAILED_CREATE = "FailedCreate"  # the Job controller's Event reason when the API server refuses a pod
UNSCHEDULABLE = "Unschedulable"
PENDING_TIMEOUT = "PendingTimeout"
RUNNING = "Running"
QUEUED_REASON = "Suspended"
TRIALS_COMPLETED = "TrialsCompleted"
REPEATS_COMPLETED = "RepeatsCompleted"
