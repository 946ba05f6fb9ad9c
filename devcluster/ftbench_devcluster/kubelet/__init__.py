"""A local kubelet: runs the pods of the test control plane as local processes.

The test control plane (``ftbench_devcluster.ControlPlane``) has no scheduler and no kubelet, so
pods stay Pending. This module plays both, for development and end-to-end tests, without
containers or images:

- It registers a Node (capacity: CPUs, memory, ``nvidia.com/gpu`` = local GPUs; the labels a
  cluster profile expects, e.g. the GPU product label) with a Ready condition and a node Lease,
  renewed every few seconds, so the node controller keeps it Ready.
- Scheduler: pods without ``spec.nodeName`` (default scheduler) whose ``nodeSelector`` matches
  the node and whose GPU request fits are bound to it through the Binding subresource.
- Kubelet: each container of a pod bound to the node runs its ``command`` + ``args`` as a local
  process (``podrun``), with the container's environment (downward API, ConfigMap/Secret
  references), working directory and volume mounts, in a private mount/UTS/PID namespace with
  its own loopback address (127.x.y.z) as pod IP and an ``/etc/hosts`` that resolves the pod DNS
  names of its namespace (``hosts``). Process mode (the default): the image is ignored, commands
  come from ``--bin-dir`` (default: this Python's bin directory, where ``ftbench-trainer`` is
  installed) and the host. Image mode (``--images``): each container runs in its image's root
  file system from buildah's storage (``hack/build-images.sh``), with the image's entrypoint,
  environment and user as Kubernetes combines them with the pod's (``images``).
- Status: Pending -> Running (startTime, podIP, running containers) -> Succeeded/Failed with
  each container's exit code, reason and termination message, as a real kubelet reports them,
  so the Job controller and the operator see what they would see on a cluster. Logs stay in
  ``<state-dir>/pods/<pod>/containers/<name>/log``.
- Deletion: a pod with a deletionTimestamp has its process group killed, then the kubelet
  confirms the deletion (grace period 0).
- Restarts: everything is kept in ``--state-dir``; containers outlive the kubelet, and a new
  kubelet adopts them (still running, or finished while it was away). A container whose process
  vanished without an exit record ends with reason ``KubeletRestarted``.

It polls the API server (a list of pods every ``--interval`` seconds) instead of watching:
on a dev cluster that is cheap, and there is no watch-resume logic to get wrong.

Known simplifications: ``restartPolicy`` is treated as Never, init containers, probes,
securityContext in process mode (the process runs as the kubelet's user; image mode honours the
user, group and runAsNonRoot, not readOnlyRootFilesystem or capabilities), resource limits and
taints are ignored; pods share the host's network (each with its own loopback address);
an in-memory emptyDir is a tmpfs per container (not shared between containers of a pod).

Run: ``python -m ftbench_devcluster.kubelet --kubeconfig K --node-name N --state-dir D``.

Modules: ``client`` (REST calls over ``ftbench.kubeapi``), ``pod_state`` (what is kept on disk,
process identity), ``node`` (Node, heartbeat, Lease), ``scheduling`` (fit and Binding),
``pod_status`` (pure status builders), ``containers`` (spec and start of one container),
``images`` (what a container gets from its image in image mode),
``runner`` (the sync loop, `LocalKubelet`), ``cli`` (arguments, ``main``).
"""

from ftbench.kubeapi import KubeError
from ftbench_devcluster.kubelet.client import Rest
from ftbench_devcluster.kubelet.pod_state import ContainerRun, PodRun, kill_all_pods
from ftbench_devcluster.kubelet.runner import LocalKubelet

__all__ = ["ContainerRun", "KubeError", "LocalKubelet", "PodRun", "Rest", "kill_all_pods"]
