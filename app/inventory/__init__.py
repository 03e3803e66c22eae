"""The device inventory: what HAMi's device plugins register on the cluster's Nodes, kept by a watch of the Nodes'
metadata (annotations only), for the fits-nowhere check (app/admission/fits.py). Each process keeps its own and
writes nothing. ``store`` decodes and indexes (no I/O); ``startup`` opens the watch."""
