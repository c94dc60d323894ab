"""Mounts a test's agent left under its directory (workspace volumes: ext4 on loop devices
with autoclear, issue 12). Unmounting them frees their loop devices, so a test run leaves no
mount and no loop device behind (`losetup -a`)."""
import os
import subprocess


def mounts_under(path):
    """Mount points under path (path included), deepest first, from /proc/self/mountinfo."""
    root = os.path.realpath(path).rstrip("/")
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            # Field 5 is the mount point, with spaces and the like escaped as \\ooo.
            mp = line.split()[4].encode().decode("unicode_escape")
            if mp == root or mp.startswith(root + "/"):
                found.append(mp)
    return sorted(set(found), key=len, reverse=True)


def unmount_under(path):
    """Unmounts (lazily) everything mounted under path; returns what was mounted."""
    found = mounts_under(path)
    for _ in range(4):  # stacked mounts show the same point more than once
        for mp in mounts_under(path):
            subprocess.run(["umount", "-l", mp], capture_output=True)
    return found
