"""A user's data-quality analyzer (swdaq.dqm): event and fragment sizes of any model's data.

Offline, over stored files, saving the set (e.g. a reference run's):

    python examples/dqm_analyzer.py --files DATA/*.raw --save sizes_reference.h5

Online, following the files a running system closes in its output directory, publishing to
`swdaq serve` every two seconds, judged against that reference (the token: --token or the
SWDAQ_TOKEN environment variable):

    python examples/dqm_analyzer.py --follow DATA --url http://127.0.0.1:8080 \\
        --reference sizes_reference.h5 --idle-timeout 60

The histograms appear in the console's data-quality view as `sizes.event_size` and
`sizes.fragment_size`, flagged Good, Bad or Undetermined against the reference.
"""

import argparse
import sys

from swdaq import dqm


class Sizes(dqm.Analyzer):
    name = "sizes"

    def __init__(self, max_bytes, bins, reference=None):
        self.max_bytes, self.bins, self.reference = max_bytes, bins, reference

    def book(self):
        if self.reference is not None:
            # The reference's binning: a run's histogram is judged bin by bin against it.
            return [dqm.Hist1(h.name, h.title, h.label, h.unit, h.bins, h.lo, h.hi, h.kind) for h in self.reference]
        return [
            dqm.Hist1("event_size", "bytes of an event's fragments", "event size", "bytes", self.bins, 0, self.max_bytes),
            dqm.Hist1("fragment_size", "bytes of each fragment", "fragment size", "bytes", self.bins, 0, self.max_bytes),
        ]

    def analyze(self, item):
        sizes = [f.size for f in item.fragments]
        self.hists["event_size"].fill(sum(sizes))
        self.hists["fragment_size"].fill(sizes)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--files", nargs="+", help="stored files to read")
    source.add_argument("--follow", metavar="DIR", help="a running system's output directory")
    parser.add_argument("--every", type=int, default=1, help="every N-th item of each file")
    parser.add_argument("--url", help="swdaq serve's address: publish there")
    parser.add_argument("--token", help="swdaq serve's token (default: $SWDAQ_TOKEN)")
    parser.add_argument("--reference", help="a saved set to be judged against (its binning is used)")
    parser.add_argument("--save", help="write the final set to this new HDF5 file")
    parser.add_argument("--max-bytes", type=float, default=1 << 20, help="the size axes' upper edge")
    parser.add_argument("--bins", type=int, default=256)
    parser.add_argument("--idle-timeout", type=float, default=None, help="--follow ends when no file closed for this long")
    parser.add_argument("--publish-every", type=float, default=2.0, help="seconds between publications")
    args = parser.parse_args(argv)

    reference = dqm.HistSet.load(args.reference) if args.reference else None
    analyzer = Sizes(args.max_bytes, args.bins, reference)
    publisher = dqm.Publisher(args.url, analyzer.name, token=args.token, reference=reference) if args.url else None
    if args.files:
        items = dqm.files(args.files, args.every)
    else:
        items = dqm.follow(args.follow, args.every, idle_timeout_s=args.idle_timeout)
    hists = analyzer.run(items, publisher=publisher, every_s=args.publish_every)
    for path, why in getattr(items, "unreadable", []):
        print(f"unreadable: {path}: {why}", file=sys.stderr)
    print(f"{hists.events} events; " + ", ".join(f"{h.name}: {h.entries} entries" for h in hists))
    if args.save:
        hists.save(args.save)


if __name__ == "__main__":
    main()
