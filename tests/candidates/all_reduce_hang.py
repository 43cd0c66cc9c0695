"""Hangs: waits forever for a message that never comes."""
import time

import torch


def solution(tensor):
    while True:
        time.sleep(0.05)
