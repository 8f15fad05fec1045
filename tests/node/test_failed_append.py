"""A tombstone that cannot be made durable: the tuple stays live, StrandError.

The failure is real: the child process lowers RLIMIT_FSIZE so the kernel
refuses to grow the segment file (EFBIG), as a full disk would.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.fixtures.children import run_python

CHILD = textwrap.dedent(
    """
    import asyncio, resource, signal, sys
    from forum.node.space.forum import Forum
    from forum.node.core.space import Pattern
    from forum.node.storage.strand import Strand, StrandConfig
    from forum.node.core.errors import StrandError

    async def main(directory):
        forum = Forum(await Strand.open(StrandConfig().with_storage(directory)))
        await forum.write_many([b"job/1", b"job/2"])
        size = forum.stats().strand_bytes
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG, not a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
        try:
            await forum.take(Pattern(b"job/"))
        except StrandError as exc:
            print("take failed:", exc)
        else:
            print("take succeeded")
        print("live", sorted(t.payload.decode() for t in forum.list(Pattern(b"")).tuples))
        print("read", (await forum.read(Pattern(b"job/"))).decode())
        try:
            await forum.write(b"job/3")
        except StrandError:
            print("write failed")
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
        print("take after", (await forum.take(Pattern(b"job/"))).decode())
        await forum.close()

    asyncio.run(main(sys.argv[1]))
    """
)


def test_failed_tombstone_append_keeps_the_tuple_live(tmp_path: Path) -> None:
    out = run_python(CHILD, str(tmp_path))
    assert "take failed:" in out and "File too large" in out
    assert "live ['job/1', 'job/2']" in out
    assert "read job/1" in out
    assert "write failed" in out
    # Once the disk has room again the same tuple is taken, in its old place,
    # and the log holds no half record (the reopen below would refuse it).
    assert "take after job/1" in out
    reopen = run_python(
        """
        import asyncio, sys
        from forum.node.space.forum import Forum
        from forum.node.core.space import Pattern
        from forum.node.storage.strand import Strand, StrandConfig
        async def main():
            f = Forum(await Strand.open(StrandConfig().with_storage(sys.argv[1])))
            print(sorted(t.payload.decode() for t in f.list(Pattern(b"")).tuples))
            await f.close()
        asyncio.run(main())
        """,
        str(tmp_path),
    )
    assert reopen.strip() == "['job/2']"
