#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets: tests/fuzz/corpus/pool/ and corpus/cache/.

Each seed is a small program in the input format written at the top of pool_fuzz.cpp and
cache_fuzz.cpp: a few bytes that make the pool or the cache, then operations, each an op byte
(the position of the op in the target's Op enum, repeated here) and its arguments. The seeds
start the fuzzer on every operation and configuration it would otherwise take long to reach:
full zspages, holes and compaction, limits and failing page sources, huge and page-spanning
objects, eviction, recompression, corrupted records and damaged compressed data.

Run it after changing the input format, and commit what it writes:
    /usr/bin/python3 tests/fuzz/make_seeds.py

corpus/cache/regress-* are not written here: they are inputs the fuzzer found that showed a
library issue (since fixed), kept as they were found. After a format change they no longer
reach their issue; rewrite them then, or drop them.
"""
import pathlib
import struct

CORPUS = pathlib.Path(__file__).resolve().parent / "corpus"


def u16(v):
    return struct.pack("<H", v)


class Program:
    """Bytes of one fuzz input, appended op by op."""

    def __init__(self, header):
        self.data = bytearray(header)

    def op(self, code, *args):
        self.data.append(code)
        for a in args:
            self.data += a if isinstance(a, (bytes, bytearray)) else bytes([a])
        return self


# --- pool_fuzz ----------------------------------------------------------------------------

(P_STORE, P_STORE_BURST, P_MALLOC_WRITE, P_READ, P_OVERWRITE, P_FREE, P_FREE_STRIDE,
 P_COMPACT, P_READ_DURING_COMPACT, P_BAD_CALL, P_CHECK_STATS, P_RECREATE, P_THREADS) = range(13)

PAGE_4K, PAGE_16K, PAGE_64K = 0, 1, 2
LIMIT, COUNTING_SOURCE, HARDENED, LOCKED_PATH = 1, 2, 4, 8
SMALL, ANY, NEAR_HUGE, NEAR_PAGE = 0, 1, 2, 3


def pool_header(page, chain, shards_sel, options=0, limit=0, fail_every=0):
    h = bytes([page, chain - 4, shards_sel, options])
    if options & LIMIT:
        h += bytes([limit])
    if options & COUNTING_SOURCE:
        h += bytes([fail_every])
    return h


def size(shape, value):
    return bytes([shape]) + u16(value)


def pool_mixed_sizes(p):
    for shape, value in [(SMALL, 10), (ANY, 700), (ANY, 3000), (NEAR_HUGE, 20), (NEAR_PAGE, 0)]:
        p.op(P_STORE_BURST, 40, size(shape, value))
    p.op(P_MALLOC_WRITE, size(ANY, 1500))
    for pick in (0, 7, 55, 120):
        p.op(P_READ, u16(pick), u16(0xffff))
        p.op(P_OVERWRITE, u16(pick), u16(pick * 97))
    return p


def pool_seeds():
    seeds = {}
    p = Program(pool_header(PAGE_4K, 8, 0))
    pool_mixed_sizes(p)
    p.op(P_FREE_STRIDE, 1, 0).op(P_CHECK_STATS).op(P_COMPACT).op(P_CHECK_STATS)
    p.op(P_FREE, u16(3)).op(P_READ_DURING_COMPACT, u16(5)).op(P_COMPACT)
    seeds["mixed-4k"] = p

    p = Program(pool_header(PAGE_16K, 4, 3, LIMIT, limit=40))
    for _ in range(6):
        p.op(P_STORE_BURST, 63, size(ANY, 5000))
    p.op(P_CHECK_STATS).op(P_FREE_STRIDE, 0, 1).op(P_COMPACT)
    p.op(P_STORE_BURST, 63, size(NEAR_PAGE, 3)).op(P_CHECK_STATS)
    seeds["limit-16k"] = p

    p = Program(pool_header(PAGE_64K, 16, 5, COUNTING_SOURCE | HARDENED, fail_every=7))
    pool_mixed_sizes(p)
    p.op(P_READ_DURING_COMPACT, u16(1)).op(P_FREE_STRIDE, 2, 1).op(P_COMPACT)
    p.op(P_STORE_BURST, 63, size(NEAR_HUGE, 9)).op(P_CHECK_STATS)
    seeds["failing-source-64k-hardened"] = p

    p = Program(pool_header(PAGE_4K, 4, 7))
    p.op(P_STORE_BURST, 20, size(ANY, 2000))
    for which in range(9):
        for arg in (0, 1, 2, 3, 4, 5):
            p.op(P_BAD_CALL, which, u16(arg * 11))
    p.op(P_CHECK_STATS)
    seeds["bad-calls"] = p

    p = Program(pool_header(PAGE_4K, 16, 1))
    p.op(P_STORE_BURST, 30, size(SMALL, 200))
    p.op(P_RECREATE, pool_header(PAGE_16K, 12, 4, COUNTING_SOURCE, fail_every=0))
    p.op(P_STORE_BURST, 30, size(ANY, 9000))
    p.op(P_RECREATE, pool_header(PAGE_64K, 6, 6, LIMIT | COUNTING_SOURCE, limit=100, fail_every=3))
    pool_mixed_sizes(p)
    seeds["recreate"] = p

    p = Program(pool_header(PAGE_4K, 8, 2))
    for value in (0, 5, 11, 17, 23, 29, 31):
        p.op(P_STORE_BURST, 25, size(NEAR_HUGE, value))
    for pick in range(0, 175, 13):
        p.op(P_READ, u16(pick), u16(0xfff0)).op(P_OVERWRITE, u16(pick), u16(0xffff))
    p.op(P_FREE_STRIDE, 3, 2).op(P_COMPACT)
    seeds["around-huge"] = p

    # Threads freeing each other's objects into their caches, between checks and compaction,
    # with caches (one shard per CPU, and one shard) and on the locked path.
    for name, header in [("threads-4k", pool_header(PAGE_4K, 8, 7)),
                         ("threads-16k-one-shard", pool_header(PAGE_16K, 8, 0)),
                         ("threads-4k-locked-path", pool_header(PAGE_4K, 8, 3, LOCKED_PATH)),
                         ("threads-4k-limit", pool_header(PAGE_4K, 4, 7, LIMIT, limit=30))]:
        p = Program(header)
        p.op(P_STORE_BURST, 30, size(ANY, 900))
        p.op(P_THREADS, 63, size(ANY, 700)).op(P_CHECK_STATS)
        p.op(P_THREADS, 40, size(SMALL, 100)).op(P_FREE_STRIDE, 1, 0).op(P_COMPACT)
        p.op(P_THREADS, 20, size(NEAR_PAGE, 5)).op(P_THREADS, 9, size(NEAR_HUGE, 3))
        p.op(P_CHECK_STATS)
        seeds[name] = p
    return seeds


# --- cache_fuzz ---------------------------------------------------------------------------

(C_PUT, C_PUT_BURST, C_GET, C_GET_INTO, C_ERASE, C_CONTAINS, C_CLEAR, C_RECOMPRESS, C_CHECK,
 C_CORRUPT_STORED, C_DECODE, C_BAD_CALL) = range(12)

LZ4, LZ4HC, ZSTD, NONE = range(4)
NO_RECOMPRESS, RE_ZSTD, RE_LZ4HC, RE_ZSTD1 = range(4)
LITERAL, REPEATED, SAME_FILLED, PATTERN, PATTERN_MAX = range(5)
MARKED_KEY_SIZE = 16  # cache_fuzz.cpp's kMarkedKeySize: the header's max_key byte adds to it


def cache_header(codec, recompress, page, chain=8, pool_shards=0, shards_sel=2, pages=6,
                 max_key=0, max_value=0):
    return bytes([codec, recompress, page, chain - 4, pool_shards, shards_sel, pages,
                  max_key]) + u16(max_value)


def key(n):
    return bytes([n])


def value(shape, length, extra=b""):
    return bytes([shape]) + u16(length) + extra


def repeated(length, chunk):
    return value(REPEATED, length, bytes([len(chunk) - 1]) + chunk)


def flips(*pairs):
    """A flip count (stored as count - 1) and (position, xor mask) pairs."""
    return bytes([len(pairs) - 1]) + b"".join(u16(pos) + bytes([mask]) for pos, mask in pairs)


def cache_values():
    text = b"zram keeps compressed pages; " * 8
    return [
        value(LITERAL, len(text), text),
        repeated(3000, b"abcdefg12"),
        value(SAME_FILLED, 4096, b"\x07" * 8),
        value(PATTERN, 1200, b"\x03"),
        value(PATTERN_MAX, 0, b"\x09"),
        value(LITERAL, 0),
    ]


def cache_seeds():
    seeds = {}
    p = Program(cache_header(LZ4, NO_RECOMPRESS, PAGE_4K, pages=16, max_key=40))
    for i, v in enumerate(cache_values()):
        p.op(C_PUT, key(i), v)
    for i in range(6):
        p.op(C_GET, key(i)).op(C_GET_INTO, key(i), u16(100)).op(C_CONTAINS, key(i))
    p.op(C_ERASE, key(2)).op(C_GET, key(2)).op(C_CHECK)
    p.op(C_PUT, bytes([250, 20]) + b"a long key, given raw", repeated(500, b"xy"))
    p.op(C_CHECK)
    seeds["basic-lz4"] = p

    p = Program(cache_header(ZSTD, RE_LZ4HC, PAGE_4K, chain=4, pages=10))
    for first in (0, 16, 32):
        p.op(C_PUT_BURST, 31, first, repeated(2500, b"evict me "))
        p.op(C_PUT_BURST, 15, first + 3, value(PATTERN, 3000, bytes([first])))
    p.op(C_CHECK).op(C_RECOMPRESS, 0).op(C_CHECK)
    for i in range(0, 48, 5):
        p.op(C_GET, key(i))
    p.op(C_CLEAR).op(C_CHECK)
    seeds["evict-zstd-recompress"] = p

    p = Program(cache_header(LZ4HC, RE_ZSTD, PAGE_16K, chain=6, pages=20, max_key=40))
    for v in cache_values():
        p.op(C_CORRUPT_STORED, v, flips((1, 0x5a), (7, 0x01), (300, 0xff)))
    p.op(C_RECOMPRESS, 0).op(C_CHECK)
    seeds["corrupt-stored-16k"] = p

    p = Program(cache_header(NONE, RE_ZSTD1, PAGE_4K, pages=8))
    p.op(C_CORRUPT_STORED, value(PATTERN_MAX, 0, b"\x05"), flips((4000, 0x80)))
    p.op(C_CORRUPT_STORED, value(SAME_FILLED, 800, b"\x01\x02\x03\x04\x05\x06\x07\x08"),
         flips((2, 0x10), (6, 0x20)))
    p.op(C_CHECK)
    seeds["corrupt-split-and-same"] = p

    p = Program(cache_header(LZ4, NO_RECOMPRESS, PAGE_4K))
    for codec in (LZ4, LZ4HC, ZSTD, NONE):
        p.op(C_DECODE, codec, 0, 0, u16(300), u16(16), bytes(range(16)))
        for v in cache_values():
            p.op(C_DECODE, codec, 0, 1, v, u16(5), 3, flips((1, 0x44), (9, 0x02)))
    p.op(C_DECODE, ZSTD, 12, b"dictionary!!", 1, repeated(1000, b"dictionary"), u16(3), 1,
         flips((0, 0x01)))
    seeds["decode"] = p

    p = Program(cache_header(ZSTD, NO_RECOMPRESS, PAGE_64K, chain=16, pages=3, max_key=0,
                             max_value=1001))
    p.op(C_PUT, key(1), value(PATTERN_MAX, 0, b"\x02"))
    for which in range(6):
        p.op(C_BAD_CALL, which, 5)
    p.op(C_GET_INTO, key(1), u16(10)).op(C_PUT_BURST, 31, 0, value(PATTERN, 900, b"\x04"))
    p.op(C_CHECK)
    seeds["bad-calls-64k"] = p

    # Few large pages, split records: a page-sized raw value under a long key takes a tail
    # zspage that fills the pool before its head is stored (a put once retried forever here).
    long_key = bytes([250, 254]) + bytes(b"long key " * 29)[:255]
    for name, page, chain, pages in (("split-64k-few-pages", PAGE_64K, 4, 16),
                                     ("split-16k-few-pages", PAGE_16K, 16, 40)):
        p = Program(cache_header(LZ4, NO_RECOMPRESS, page, chain=chain, pages=pages,
                                 max_key=256 - MARKED_KEY_SIZE))
        p.op(C_PUT, key(1), value(PATTERN, 22500, b"\x01"))
        p.op(C_PUT, key(2), value(PATTERN, 5, b"\x02"))
        p.op(C_PUT, long_key, value(PATTERN_MAX, 0, b"\x03"))
        p.op(C_PUT_BURST, 15, 3, value(PATTERN_MAX, 0, b"\x04"))
        p.op(C_CHECK)
        seeds[name] = p
    return seeds


def write(target, seeds):
    directory = CORPUS / target
    directory.mkdir(parents=True, exist_ok=True)
    for name, program in seeds.items():
        (directory / name).write_bytes(bytes(program.data))


def main():
    write("pool", pool_seeds())
    write("cache", cache_seeds())
    total = sum(f.stat().st_size for f in CORPUS.rglob("*") if f.is_file())
    print(f"seeds written under {CORPUS}: {total} bytes")


if __name__ == "__main__":
    main()
