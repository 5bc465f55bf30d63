"""Upstream Samudra's ``samudra_rust_loader`` API, served by om4.

Samudra's ``data.loading.type: rust`` imports this module; with the om4 wheel installed it reads
through om4's store, with om4's validation, and needs no change to Samudra's code.
"""

from om4._native import CompactOm4Reader, FlatOm4ReadPool, FlatOm4Reader

__all__ = ["CompactOm4Reader", "FlatOm4ReadPool", "FlatOm4Reader"]
