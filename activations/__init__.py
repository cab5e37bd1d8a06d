"""The on-disk activation store (HDF5 through h5py)."""
