"""Nested structures as TF's ``nest`` sees them: tuples (namedtuples
included), lists and mappings (dicts and their subclasses, in sorted key
order) hold leaves; anything else is a leaf.

Mismatched structures raise errors.InvalidArgumentError (a ValueError, as
TF's nest raises)."""

import collections
import collections.abc

from .errors import InvalidArgumentError

_Mapping = collections.abc.Mapping


def is_structure(x, lists=True):
  return isinstance(x, (tuple, _Mapping)) or (lists and isinstance(x, list))


def flatten(x, lists=True):
  """The leaves of ``x`` in order."""
  out = []
  _flatten(x, lists, out)
  return out


def _flatten(x, lists, out):
  if isinstance(x, _Mapping):
    for k in sorted(x):
      _flatten(x[k], lists, out)
  elif isinstance(x, tuple) or (lists and isinstance(x, list)):
    for v in x:
      _flatten(v, lists, out)
  else:
    out.append(x)


def pack_as(structure, leaves, lists=True):
  """``structure`` with its leaves replaced, in order, by ``leaves``."""
  it = iter(leaves)
  try:
    out = _pack(structure, it, lists)
  except StopIteration:
    raise InvalidArgumentError(f"pack_as: expected as many leaves as the structure {describe(structure, lists)} "
                               f"has, got fewer") from None
  rest = list(it)
  if rest:
    raise InvalidArgumentError(f"pack_as: expected as many leaves as the structure {describe(structure, lists)} "
                               f"has, got {len(rest)} more")
  return out


def _pack(s, it, lists):
  if isinstance(s, _Mapping):
    values = {k: _pack(s[k], it, lists) for k in sorted(s)}
    if type(s) is dict:
      return {k: values[k] for k in s}
    if isinstance(s, collections.abc.MutableMapping):
      # As TF's nest: a new instance of the type (a defaultdict with the
      # same default_factory), then the items in the instance's order.
      out = type(s)(s.default_factory) if isinstance(s, collections.defaultdict) else type(s)()
      for k in s:
        out[k] = values[k]
      return out
    return type(s)({k: values[k] for k in s})  # (an immutable mapping: from a dict)
  if isinstance(s, tuple):
    values = [_pack(v, it, lists) for v in s]
    return type(s)(*values) if hasattr(s, "_fields") else tuple(values)
  if lists and isinstance(s, list):
    return [_pack(v, it, lists) for v in s]
  return next(it)


def map_structure(fn, *structures, lists=True):
  """fn applied to the corresponding leaves of ``structures`` (which must
  have the same structure; else InvalidArgumentError naming the first
  difference)."""
  first = structures[0]
  for other in structures[1:]:
    assert_same_structure(first, other, lists)
  flats = [flatten(s, lists) for s in structures]
  return pack_as(first, [fn(*leaves) for leaves in zip(*flats)], lists)


def describe(x, lists=True):
  if isinstance(x, _Mapping):
    return "{" + ", ".join(f"{k!r}: {describe(x[k], lists)}" for k in sorted(x)) + "}"
  if isinstance(x, tuple):
    return "(" + ", ".join(describe(v, lists) for v in x) + ("," if len(x) == 1 else "") + ")"
  if lists and isinstance(x, list):
    return "[" + ", ".join(describe(v, lists) for v in x) + "]"
  return "."


def assert_same_structure(a, b, lists=True, where="", a_name="the first", b_name="the second"):
  difference = _difference(a, b, lists, where or "the value")
  if difference is not None:
    raise InvalidArgumentError(f"expected the same nested structure in {a_name} and {b_name} value: {difference}")


def _difference(a, b, lists, path):
  sa, sb = is_structure(a, lists), is_structure(b, lists)
  if not sa and not sb:
    return None
  if sa != sb or type(a) is not type(b) and not (isinstance(a, tuple) and isinstance(b, tuple)
                                                    and not hasattr(a, "_fields") and not hasattr(b, "_fields")):
    return f"at {path}: {describe(a, lists)} vs {describe(b, lists)}"
  if isinstance(a, _Mapping):
    if sorted(a) != sorted(b):
      return f"at {path}: keys {sorted(a)} vs {sorted(b)}"
    for k in sorted(a):
      d = _difference(a[k], b[k], lists, f"{path}[{k!r}]")
      if d:
        return d
    return None
  if len(a) != len(b):
    return f"at {path}: {len(a)} elements vs {len(b)}"
  for i, (x, y) in enumerate(zip(a, b)):
    d = _difference(x, y, lists, f"{path}[{i}]")
    if d:
      return d
  return None
