"""Your own data-quality histograms, shown and judged in swdaq's console beside the built-in ones.

An analyzer books histograms (``Hist1``), fills them from items of swdaq's files (a
``Record``, ``FrdEvent``, ``AtlasEvent`` or ``Frame``, as ``swdaq.open`` gives them) and
publishes its set to ``swdaq serve`` (``POST /dqm/published``), which judges each histogram
against the reference set the analyzer sends by the run's ``[dqm]`` test and shows it in the
console's data-quality view, a Bad one raising an alert::

    from swdaq import dqm

    class Sizes(dqm.Analyzer):
        name = "sizes"

        def book(self):
            return [dqm.Hist1("event_size", "event size", "size", "bytes", 100, 0, 100_000)]

        def analyze(self, item):
            self.hists["event_size"].fill(sum(f.size for f in item.fragments))

    # Offline, over a reference run's files: the set to judge later runs against.
    Sizes().run(dqm.files(paths)).save("sizes_reference.h5")
    # Online: each file the running system closes in its output directory, published
    # every two seconds.
    publisher = dqm.Publisher("http://127.0.0.1:8080", "sizes", token=token,
                              reference=dqm.HistSet.load("sizes_reference.h5"))
    Sizes().run(dqm.follow(output_dir, idle_timeout_s=60), publisher=publisher)

A histogram's binning is swdaq's own, done by its code (bins of equal width from ``lo`` to
``hi``; a value below ``lo`` or not a number is underflow, one at or above ``hi`` overflow), so a set saved
here (``HistSet.save``, the HDF5 layout of a run's ``dqm_runNNNNNN.h5``) and a run's read
alike, with h5py or ``HistSet.load``.
"""

import json
import os
import time
import urllib.error
import urllib.request

import numpy as np

KINDS = ("distribution", "counts")
# The bins a histogram may have: run control takes no more from an analyzer.
MAX_BINS = 4096
# The suffixes of the data files swdaq writes (a chain's HDF5 records, CMS FRD, ATLAS
# EventStorage, link frames); a file being written ends otherwise (``.writing``, ``.tmp``)
# until it is closed.
DATA_SUFFIXES = (".hdf5", ".raw", ".data", ".swraw")


class Hist1:
    """A one-dimensional histogram of counts, under- and overflow kept (slot 0 and the last)."""

    def __init__(self, name, title, label, unit, bins, lo, hi, kind="distribution"):
        if not isinstance(bins, (int, np.integer)) or not 1 <= bins <= MAX_BINS:
            raise ValueError(f"histogram {name}: bins {bins!r}: give a whole number in [1, {MAX_BINS}]")
        if kind not in KINDS:
            raise ValueError(f"histogram {name}: kind {kind!r}: one of {KINDS}")
        import swdaq

        lo, hi = float(lo), float(hi)
        try:
            # swdaq's own axis check (Hist1::new): its empty histogram is this one's start.
            self.counts = swdaq._bin(int(bins), lo, hi, np.empty(0))
        except ValueError:
            raise ValueError(f"histogram {name}: {bins} bins from {lo} to {hi} is no axis") from None
        self.name, self.title, self.label, self.unit, self.kind = name, title, label, unit, kind
        self.bins, self.lo, self.hi = int(bins), lo, hi

    def fill(self, values):
        """Counts one value or each of an array's, binned by swdaq's own code."""
        import swdaq

        x = np.ascontiguousarray(np.asarray(values, dtype=np.float64).ravel())
        self.counts += swdaq._bin(self.bins, self.lo, self.hi, x)

    @property
    def entries(self):
        return int(self.counts.sum())

    @property
    def underflow(self):
        return int(self.counts[0])

    @property
    def overflow(self):
        return int(self.counts[-1])

    def to_json(self):
        return {
            "name": self.name,
            "title": self.title,
            "kind": self.kind,
            "axis": {"label": self.label, "unit": self.unit, "bins": self.bins, "lo": self.lo, "hi": self.hi},
            "counts": [int(c) for c in self.counts],
        }

    @classmethod
    def from_json(cls, value):
        axis = value["axis"]
        h = cls(value["name"], value["title"], axis["label"], axis["unit"], axis["bins"], axis["lo"], axis["hi"],
                value.get("kind", "distribution"))
        h.counts[:] = np.asarray(value["counts"], dtype=np.uint64)
        return h

    def __repr__(self):
        return f"Hist1({self.name!r}, {self.bins} bins from {self.lo} to {self.hi} {self.unit}, {self.entries} entries)"


class HistSet:
    """Histograms by name and the events they were filled from: what is published and saved."""

    def __init__(self, histograms=(), events=0):
        self.events = int(events)
        self._histograms = {}
        for h in histograms:
            self.add(h)

    def add(self, h):
        if h.name in self._histograms:
            raise ValueError(f"histogram {h.name} is in the set already")
        self._histograms[h.name] = h
        return h

    def __getitem__(self, name):
        return self._histograms[name]

    def __iter__(self):
        return iter(self._histograms.values())

    def __len__(self):
        return len(self._histograms)

    def to_json(self):
        """The set in swdaq's JSON form, checked as run control checks what it is sent."""
        import swdaq

        text = json.dumps({
            "version": swdaq._DQM_SET_VERSION,
            "events": self.events,
            "histograms": {h.name: h.to_json() for h in self},
        })
        return json.loads(swdaq._check_set(text))

    @classmethod
    def from_json(cls, value):
        import swdaq

        checked = json.loads(swdaq._check_set(json.dumps(value)))
        return cls((Hist1.from_json(h) for h in checked["histograms"].values()), checked["events"])

    def save(self, path):
        """Writes a new HDF5 file (never replacing one) in the layout of a run's saved set."""
        import swdaq

        swdaq._save_set(json.dumps(self.to_json()), os.fspath(path))
        return self

    @classmethod
    def load(cls, path):
        """A set saved by ``save`` or by a run (``dqm_runNNNNNN.h5``)."""
        import swdaq

        return cls.from_json(json.loads(swdaq._load_set(os.fspath(path))))


class PublishError(RuntimeError):
    """Run control refused a set or could not be reached; ``code`` is the HTTP status (0: none)."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}" if code else message)
        self.code = code


class Publisher:
    """Sends an analyzer's set to ``swdaq serve`` at ``url`` (its token: ``token``, else the
    ``SWDAQ_TOKEN`` environment variable), with the reference set it is judged against."""

    def __init__(self, url, analyzer, token=None, reference=None, timeout_s=5.0):
        self.url = url.rstrip("/") + "/dqm/published"
        self.analyzer = analyzer
        self.token = token if token is not None else os.environ.get("SWDAQ_TOKEN")
        self.reference = reference.to_json() if reference is not None else None
        self.timeout_s = timeout_s

    def publish(self, hset):
        """Run control's answer (the run the set was kept for); raises ``PublishError``."""
        body = {"analyzer": self.analyzer, "set": hset.to_json()}
        if self.reference is not None:
            body["reference"] = self.reference
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), method="POST")
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as e:
            try:
                why = json.loads(e.read()).get("error", e.reason)
            except ValueError:
                why = e.reason
            raise PublishError(e.code, why) from None
        except (urllib.error.URLError, OSError) as e:
            raise PublishError(0, f"{self.url}: {getattr(e, 'reason', e)}") from None


class Analyzer:
    """Subclass it: ``name``, ``book()`` (the histograms) and ``analyze(item)`` (fills them)."""

    name = None

    def book(self):
        raise NotImplementedError

    def analyze(self, item):
        raise NotImplementedError

    def run(self, items, publisher=None, every_s=2.0):
        """Fills a new set from every item (each counted as an event) and returns it; with a
        ``publisher``, publishes it every ``every_s`` seconds and at the end. A refused
        publication is raised; an unreachable server is retried at the next one."""
        self.hists = HistSet(self.book())
        self.unpublished = 0
        last = time.monotonic()
        for item in items:
            self.analyze(item)
            self.hists.events += 1
            if publisher is not None and time.monotonic() - last >= every_s:
                self._publish(publisher)
                last = time.monotonic()
        if publisher is not None:
            self._publish(publisher)
        return self.hists

    def _publish(self, publisher):
        try:
            publisher.publish(self.hists)
        except PublishError as e:
            if e.code:
                raise
            self.unpublished += 1


def _modified(path):
    try:
        return os.path.getmtime(path)
    except OSError:
        return 0.0  # gone already: its reading names it


def files(paths, every=1):
    """Every ``every``-th item of each file in ``paths``, in order."""
    import swdaq

    for path in paths:
        with swdaq.open(os.fspath(path)) as f:
            for i, item in enumerate(f):
                if i % every == 0:
                    yield item


class follow:
    """The items of each data file closed in ``directory`` or below it from now on (``existing``: those
    already there too), oldest first, every ``every``-th of each: a running system's data
    as it reaches the disk. Ends when ``stop()`` says so or when no file has closed for
    ``idle_timeout_s`` (``None``: never). A file that cannot be read is named in
    ``unreadable`` and skipped."""

    def __init__(self, directory, every=1, existing=False, poll_s=0.5, idle_timeout_s=None, stop=None):
        self.directory, self.every, self.poll_s = os.fspath(directory), every, poll_s
        self.idle_timeout_s, self.stop = idle_timeout_s, stop or (lambda: False)
        self.read, self.unreadable = [], []
        self._seen = set() if existing else set(self._closed())

    def _closed(self):
        # Each model has its own layout under the output directory (the event builder's
        # files are in bu0/run000001/): every data file below it is looked at.
        closed = []
        for parent, dirs, names in os.walk(self.directory):
            dirs.sort()
            closed += [os.path.join(parent, n) for n in names if n.endswith(DATA_SUFFIXES) and not n.startswith("dqm_")]
        return closed

    def __iter__(self):
        idle_since = time.monotonic()
        while not self.stop():
            paths = sorted((p for p in self._closed() if p not in self._seen), key=_modified)
            for path in paths:
                self._seen.add(path)
                try:
                    yield from files([path], self.every)
                    self.read.append(path)
                except (OSError, ValueError) as e:
                    self.unreadable.append((path, str(e)))
                if self.stop():
                    return
            if paths:
                idle_since = time.monotonic()
            elif self.idle_timeout_s is not None and time.monotonic() - idle_since >= self.idle_timeout_s:
                return
            time.sleep(self.poll_s)
