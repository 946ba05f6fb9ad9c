"""Pure functions from an experiment to what runs it: the launch plan and the Kubernetes manifests."""
