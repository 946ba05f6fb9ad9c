"""Running experiments on this machine (`ftbench run`) and keeping their results (`ftbench results`)."""
