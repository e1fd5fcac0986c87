"""Folders thousands of levels deep, made and removed from descriptors one level at a time: the
whole path is longer than PATH_MAX, and `shutil.rmtree` (recursive) fails on them with RecursionError."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def make_nested(root: Path, levels: int, files: dict[int, tuple[str, str]], name: str = "d") -> None:
    """`levels` folders called `name`, each in the one before, under `root`; files[level] = (file name,
    text) is written in the folder of that level (0: the first)."""
    fd = os.open(root, DIRECTORY)
    try:
        for level in range(levels):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
            if level in files:
                file_name, text = files[level]
                out = os.open(file_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=fd)
                try:
                    os.write(out, text.encode())
                finally:
                    os.close(out)
    finally:
        os.close(fd)


def remove_nested(root: Path, name: str = "d") -> None:
    """Remove the chain of `name` folders under `root` (and the files in them), deepest first."""
    chain = [os.open(root, DIRECTORY)]
    try:
        while True:
            try:
                chain.append(os.open(name, DIRECTORY, dir_fd=chain[-1]))
            except FileNotFoundError:
                break
        while len(chain) > 1:
            fd = chain.pop()
            for entry in os.listdir(fd):
                if entry != name:
                    os.unlink(entry, dir_fd=fd)
            os.close(fd)
            os.rmdir(name, dir_fd=chain[-1])
    finally:
        for fd in chain:
            with contextlib.suppress(OSError):
                os.close(fd)
