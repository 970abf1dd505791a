# The huge pages of a running process under libllamalloc.so, one line each: who holds them. Load into gdb on the
# live process (it stops it for a moment; the library needs its debug information, as RelWithDebInfo builds have):
#
#   gdb -p PID -batch -ex "source scripts/gdb-heap-pages.py"
#
# Per huge page in use: its region and index, state (open/active), lifetime class, blocks in use, the size-class
# spans on it (how many, how many empty -- no object in them --, on a thread's queue, with frees by other threads
# not yet taken in, how many heaps own them), the KiB of objects in them and of the spans, blocks used by large
# objects, and the spans by the lifetime class of their objects: {class: (spans, KiB of objects)}. This is how the
# idle-thread sweep and the shared heap of long-lived classes were found to be needed (docs/heap.md).
import gdb

STATES = {1: "open", 2: "active"}


def popcount(bitmap):
    return sum(bin(int(bitmap["words"][i])).count("1") for i in range(4))


def main():
    heap = gdb.parse_and_eval("'llamalloc::g_page_heap'")
    meta_type = gdb.lookup_type("llamalloc::HugePageMeta")
    stride = (meta_type.sizeof + 4095) // 4096 * 4096  # kPageMetaStride
    total_pages = total_used = total_spans = 0
    for r in range(int(heap["region_count_"])):
        region = heap["regions_"][r]
        for i in range(int(region["committed"])):
            page = (region["metadata"] + i * stride).cast(meta_type.pointer()).dereference()
            state = int(page["state"])
            if state == 0:
                continue
            spans = {}
            for s in range(128):
                span = page["size_spans"][s]["_M_b"]["_M_p"]
                if int(span) != 0 and int(span) not in spans:
                    d = span.dereference()
                    spans[int(span)] = dict(used=int(d["used"]), queued=int(d["queued"]), bytes=int(d["span_bytes"]),
                                            xfree=int(d["remote_pending"]["_M_i"]) != 0, owner=int(d["owner"]),
                                            block=int(d["block_size"]), lc=int(d["lifetime_class"]))
            sp = list(spans.values())
            used = sum(v["used"] * v["block"] for v in sp)
            by_class = {c: (sum(1 for v in sp if v["lc"] == c), sum(v["used"] * v["block"] for v in sp if v["lc"] == c) // 1024)
                        for c in sorted({v["lc"] for v in sp})}
            large_starts = popcount(page["large_start"])
            print(f"page {r}.{i} {STATES.get(state, state)} class={int(page['lifetime_class'])} "
                  f"blocks={popcount(page['live'])} spans={len(sp)} empty={sum(1 for v in sp if v['used'] == 0)} "
                  f"queued={sum(1 for v in sp if v['queued'])} remote_frees={sum(1 for v in sp if v['xfree'])} "
                  f"owners={len({v['owner'] for v in sp})} objects_KiB={used // 1024} "
                  f"spans_KiB={sum(v['bytes'] for v in sp) // 1024} large={large_starts - len(sp)} by_class={by_class}")
            total_pages += 1
            total_used += used
            total_spans += len(sp)
    print(f"{total_pages} huge pages in use ({total_pages * 2} MiB), {total_spans} size-class spans, "
          f"{total_used // 1024} KiB of small objects in them")


main()
