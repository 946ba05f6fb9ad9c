"""The network preflight: a collective bandwidth self-test before training, and the transport in effect.

`bandwidth` holds the nccl-tests formulas (pure), `nccl_log` reads NCCL's init lines (pure),
`preflight` runs the collectives with torch.distributed and puts the two together.
"""
