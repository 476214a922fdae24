"""Hydra configs of the rlplace apps, installed as the package rlplace.conf."""
