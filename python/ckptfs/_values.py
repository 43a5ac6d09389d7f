# SPDX-License-Identifier: MIT
"""value.json decoded into Python values by docs/VALUES.md's rule."""

# The markers VALUES.md defines for plain data; an object with another key that starts and ends
# with "__" describes what is not plain data (an instance, a global...).
_PLAIN_MARKERS = {"__int__", "__float__", "__bytes__", "__bytearray__", "__tuple__", "__set__",
                  "__frozenset__", "__dict__"}


class Described(dict):
    """ckptfs.Described -- a value the checkpoint holds that is not plain data.

    DESCRIPTION
        An object of some class (an argparse.Namespace, an optimizer's class), a global, a
        value nested or sized past ckptfs's limits: ckptfs never builds it (no pickle is run),
        and value.json describes it instead, as {"__class__": "argparse.Namespace", "args":
        [...], "state": {...}}, {"__global__": "torch.float32"}, {"__truncated__": true,
        ...}. A Described is that description, as a dict (docs/VALUES.md).
    """

    def __repr__(self):
        return f"ckptfs.Described({dict.__repr__(self)})"


def _marker_like(key):
    return isinstance(key, str) and len(key) >= 4 and key.startswith("__") and key.endswith("__")


def _hashable(value):
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _text(s):
    """The str a JSON string of ckptfs stands for: a byte that is not UTF-8 (a lone surrogate
    of the checkpoint's str, written with surrogatepass) is the escape \\udcXX of that byte."""
    if any("\udc80" <= c <= "\udcff" for c in s):
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "surrogatepass")
    return s


def decode(j):
    """decode(j) -> object: the Python value the parsed value.json `j` says.

    DESCRIPTION
        None, bools, ints, floats, strs and lists are themselves (a str's byte that is not
        UTF-8, written \\udcXX, is decoded back into the lone surrogate the str held);
        {"__tuple__": [...]} a tuple, {"__set__"...} a set, {"__frozenset__"...} a frozenset,
        {"__bytes__": hex} bytes, {"__bytearray__": hex} a bytearray, {"__int__": "0x..."} a
        large int, {"__float__": "nan"} (inf, -inf) a float, {"__dict__": [[k, v], ...]} a dict
        with keys of any kind, any other object a dict. A value up to the types Python finds
        equal: an OrderedDict comes back a dict, a torch.Size a tuple, a numpy scalar an int,
        float or bool. What is not plain data comes back as a Described (its description),
        and so does a marker whose body is not what the rule writes.
    """
    if isinstance(j, list):
        return [decode(i) for i in j]
    if isinstance(j, str):
        return _text(j)
    if not isinstance(j, dict):
        return j
    if not any(_marker_like(k) for k in j):
        return {_text(k): decode(v) for k, v in j.items()}
    if len(j) == 1:
        (marker, body), = j.items()
        if marker in _PLAIN_MARKERS:
            value = _decode_marker(marker, body)
            if value is not _NOT_PLAIN:
                return value
    return Described(j)


_NOT_PLAIN = object()


def _decode_marker(marker, body):
    if marker == "__float__" and body in ("nan", "inf", "-inf"):
        return float(body)
    if marker == "__int__" and isinstance(body, str):
        try:
            return int(body, 16)
        except ValueError:
            return _NOT_PLAIN
    if marker in ("__bytes__", "__bytearray__") and isinstance(body, str):
        try:
            raw = bytes.fromhex(body)
        except ValueError:
            return _NOT_PLAIN
        return raw if marker == "__bytes__" else bytearray(raw)
    if marker in ("__tuple__", "__set__", "__frozenset__") and isinstance(body, list):
        items = [decode(i) for i in body]
        if marker == "__tuple__":
            return tuple(items)
        if not all(_hashable(i) for i in items):
            return _NOT_PLAIN
        return set(items) if marker == "__set__" else frozenset(items)
    if marker == "__dict__" and isinstance(body, list):
        out = {}
        for pair in body:
            if not isinstance(pair, list) or len(pair) != 2:
                return _NOT_PLAIN
            key = decode(pair[0])
            if not _hashable(key):
                return _NOT_PLAIN
            out[key] = decode(pair[1])
        return out
    return _NOT_PLAIN
