"""Generated documentation (`docs.py`: the tables of docs/, `ftbench docs`); the write-or-check loop
every generator shares is `ftbench.host.files.sync_generated`."""
