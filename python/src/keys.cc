#include "keys.h"

#include <nanobind/stl/string.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

namespace kvtier::python {

using client::BlockKey;

namespace {

// The Keys type, once bound: an argument of exactly this type is read in
// place (the class is final, so no subclass check is needed).
PyTypeObject* keys_type = nullptr;

bool IsKeys(nb::handle h) { return keys_type != nullptr && Py_TYPE(h.ptr()) == keys_type; }

const PyKeys& AsKeys(nb::handle h) { return *nb::inst_ptr<PyKeys>(h); }

BlockKey Decode(const char* p) {
  uint64_t hi = 0, lo = 0;
  std::memcpy(&hi, p, 8);
  std::memcpy(&lo, p + 8, 8);
  return BlockKey{__builtin_bswap64(hi), __builtin_bswap64(lo)};
}

void Encode(const BlockKey& k, char* p) {
  const uint64_t hi = __builtin_bswap64(k.hi), lo = __builtin_bswap64(k.lo);
  std::memcpy(p, &hi, 8);
  std::memcpy(p + 8, &lo, 8);
}

bool IsKeyBytes(PyObject* item) {
  return PyBytes_Check(item) && PyBytes_GET_SIZE(item) == static_cast<Py_ssize_t>(kKeyBytes);
}

[[noreturn]] void BadKey() {
  throw nb::value_error("a block key is a bytes object of 16 bytes (from Client.block_keys)");
}

// A bytes object of n keys, to be filled through Mutable() before anyone
// else sees it.
nb::bytes NewBuffer(size_t n) {
  return nb::steal<nb::bytes>(
      PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(n * kKeyBytes)));
}
char* Mutable(const nb::bytes& b) { return PyBytes_AS_STRING(b.ptr()); }

nb::object Wrap(PyKeys keys) { return nb::cast(std::move(keys)); }

// The items of a list, a tuple or any other sequence, each checked to be a
// 16-byte bytes object.
template <typename F>
void ForEachKeyItem(nb::handle keys, F&& f) {
  nb::object seq =
      nb::steal(PySequence_Fast(keys.ptr(), "keys must be a sequence of 16-byte keys"));
  if (!seq.is_valid()) throw nb::python_error();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
  PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!IsKeyBytes(items[i])) BadKey();
    f(static_cast<size_t>(i), static_cast<size_t>(n), PyBytes_AS_STRING(items[i]));
  }
  if (n == 0) f(0, 0, nullptr);
}

// Keys from anything Keys() takes: a Keys (shared), a bytes-like object of
// 16 * n bytes, or a sequence of 16-byte bytes objects.
PyKeys KeysFrom(nb::handle src) {
  if (IsKeys(src)) return AsKeys(src);
  if (PyBytes_Check(src.ptr()) || PyObject_CheckBuffer(src.ptr())) {
    Py_buffer view;
    if (PyObject_GetBuffer(src.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) throw nb::python_error();
    const size_t len = static_cast<size_t>(view.len);
    if (len % kKeyBytes != 0) {
      PyBuffer_Release(&view);
      throw nb::value_error(
          ("a buffer of keys holds 16 bytes per key, not " + std::to_string(len) + " bytes")
              .c_str());
    }
    nb::bytes buffer =
        PyBytes_CheckExact(src.ptr()) ? nb::borrow<nb::bytes>(src) : nb::bytes(view.buf, len);
    PyBuffer_Release(&view);
    return PyKeys(std::move(buffer), 0, len / kKeyBytes);
  }
  if (PyUnicode_Check(src.ptr())) throw nb::type_error("keys must be bytes, not str");
  nb::bytes buffer;
  size_t count = 0;
  ForEachKeyItem(src, [&](size_t i, size_t n, const char* key) {
    if (i == 0) {
      buffer = NewBuffer(n);
      count = n;
    }
    if (key != nullptr) std::memcpy(Mutable(buffer) + i * kKeyBytes, key, kKeyBytes);
  });
  return PyKeys(std::move(buffer), 0, count);
}

size_t Index(const PyKeys& k, int64_t i) {
  const int64_t n = static_cast<int64_t>(k.size());
  if (i < -n || i >= n) {
    throw nb::index_error(
        ("key index " + std::to_string(i) + " out of range for " + std::to_string(n) + " keys")
            .c_str());
  }
  return static_cast<size_t>(i < 0 ? i + n : i);
}

// The first position from `from` on of a 16-byte bytes `key`, or size().
size_t Find(const PyKeys& k, nb::handle key, size_t from = 0) {
  if (!IsKeyBytes(key.ptr())) return k.size();
  for (size_t i = from; i < k.size(); ++i) {
    if (std::memcmp(k.data() + i * kKeyBytes, PyBytes_AS_STRING(key.ptr()), kKeyBytes) == 0) {
      return i;
    }
  }
  return k.size();
}

nb::bytes Item(const PyKeys& k, size_t i) { return nb::bytes(k.data() + i * kKeyBytes, kKeyBytes); }

nb::object Slice(const PyKeys& k, const nb::slice& s) {
  const auto [start, stop, step, n] = s.compute(k.size());
  (void)stop;
  if (step == 1) return Wrap(k.Slice(static_cast<size_t>(start), n));
  nb::bytes out = NewBuffer(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t from = static_cast<size_t>(start + static_cast<Py_ssize_t>(i) * step);
    std::memcpy(Mutable(out) + i * kKeyBytes, k.data() + from * kKeyBytes, kKeyBytes);
  }
  return Wrap(PyKeys(std::move(out), 0, n));
}

// Equal to a Keys of the same keys, or to a list of the same 16-byte
// bytes (what block_keys returned before Keys); anything else is not ours
// to compare.
nb::object Equal(const PyKeys& a, nb::handle b) {
  if (IsKeys(b)) {
    const PyKeys& k = AsKeys(b);
    return nb::bool_(k.size() == a.size() &&
                     std::memcmp(k.data(), a.data(), a.size() * kKeyBytes) == 0);
  }
  if (!PyList_Check(b.ptr())) return nb::borrow(Py_NotImplemented);
  if (static_cast<size_t>(PyList_GET_SIZE(b.ptr())) != a.size()) return nb::bool_(false);
  for (size_t i = 0; i < a.size(); ++i) {
    PyObject* item = PyList_GET_ITEM(b.ptr(), static_cast<Py_ssize_t>(i));
    if (!IsKeyBytes(item) ||
        std::memcmp(PyBytes_AS_STRING(item), a.data() + i * kKeyBytes, kKeyBytes) != 0) {
      return nb::bool_(false);
    }
  }
  return nb::bool_(true);
}

nb::bytes AllBytes(const PyKeys& k) {
  if (k.whole_buffer()) return k.buffer();
  return nb::bytes(k.data(), k.size() * kKeyBytes);
}

std::string Repr(const PyKeys& k) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "Keys(" + std::to_string(k.size()) + (k.size() == 1 ? " key" : " keys");
  for (size_t i = 0; i < std::min<size_t>(k.size(), 2); ++i) {
    out += i == 0 ? ": " : ", ";
    for (size_t b = 0; b < kKeyBytes; ++b) {
      const auto c = static_cast<unsigned char>(k.data()[i * kKeyBytes + b]);
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out + (k.size() > 2 ? ", ...)" : ")");
}

// The buffer protocol: the keys' 16 * n bytes, read-only.
int GetBuffer(PyObject* self, Py_buffer* view, int flags) {
  const PyKeys& k = *nb::inst_ptr<PyKeys>(self);
  return PyBuffer_FillInfo(view, self, const_cast<char*>(k.data()),
                           static_cast<Py_ssize_t>(k.size() * kKeyBytes), /*readonly=*/1, flags);
}

PyType_Slot keys_slots[] = {{Py_bf_getbuffer, reinterpret_cast<void*>(GetBuffer)}, {0, nullptr}};

// Iteration, one bytes object per key. tp_iternext ends with NULL and no
// exception set, as CPython's own iterators do (no StopIteration raised).
struct KeysIterator {
  nb::object keys;
  size_t next = 0;
};

PyObject* IterNext(PyObject* self) {
  KeysIterator& it = *nb::inst_ptr<KeysIterator>(self);
  const PyKeys& k = AsKeys(it.keys);
  if (it.next >= k.size()) return nullptr;
  const char* key = k.data() + it.next++ * kKeyBytes;
  return PyBytes_FromStringAndSize(key, kKeyBytes);
}

PyType_Slot iterator_slots[] = {{Py_tp_iter, reinterpret_cast<void*>(PyObject_SelfIter)},
                                {Py_tp_iternext, reinterpret_cast<void*>(IterNext)},
                                {0, nullptr}};

}  // namespace

KeyList::KeyList(nb::handle keys) {
  if (IsKeys(keys)) {
    const PyKeys& k = AsKeys(keys);
    size_ = k.size();
    if (size_ > kInline) {
      heap_.resize(size_);
      data_ = heap_.data();
    } else {
      data_ = reinterpret_cast<BlockKey*>(inline_);
    }
    const char* p = k.data();
    for (size_t i = 0; i < size_; ++i) new (&data_[i]) BlockKey(Decode(p + i * kKeyBytes));
    return;
  }
  if (PyBytes_Check(keys.ptr())) {
    throw nb::type_error("keys must be a sequence of 16-byte keys, not one bytes object");
  }
  ForEachKeyItem(keys, [&](size_t i, size_t n, const char* key) {
    if (i == 0) {
      size_ = n;
      if (n > kInline) {
        heap_.resize(n);
        data_ = heap_.data();
      } else {
        data_ = reinterpret_cast<BlockKey*>(inline_);
      }
    }
    if (key != nullptr) new (&data_[i]) BlockKey(Decode(key));
  });
}

BlockKey KeyFromPython(nb::handle key) {
  if (!IsKeyBytes(key.ptr())) BadKey();
  return Decode(PyBytes_AS_STRING(key.ptr()));
}

nb::bytes KeyToPython(const BlockKey& key) {
  char data[kKeyBytes];
  Encode(key, data);
  return nb::bytes(data, sizeof data);
}

nb::object KeysToPython(std::span<const BlockKey> keys) {
  nb::bytes buffer = NewBuffer(keys.size());
  char* p = Mutable(buffer);
  for (size_t i = 0; i < keys.size(); ++i) Encode(keys[i], p + i * kKeyBytes);
  return Wrap(PyKeys(std::move(buffer), 0, keys.size()));
}

void BindKeys(nb::module_& m) {
  nb::class_<KeysIterator>(m, "KeysIterator", nb::is_final(), nb::type_slots(iterator_slots),
                           "An iterator over a Keys, one 16-byte bytes object per key.");

  nb::class_<PyKeys> cls(m, "Keys", nb::is_final(), nb::type_slots(keys_slots),
                         R"(An immutable sequence of block keys held in one buffer.

What Client.block_keys returns and every call taking keys reads in place (a
list or tuple of 16-byte bytes is taken too). ``keys[i]`` is key i as 16
bytes (``keys[i].hex()`` is the C++ BlockKey::ToHex(); a parent key for
allocate, put and block_keys), ``keys[a:b]`` a Keys sharing the buffer (no
copy), ``len(keys)``, iteration, ``==`` (with a Keys, or a list of bytes),
``bytes(keys)`` and the buffer protocol (the keys' 16 bytes each, back to
back, read-only; ``numpy.frombuffer(keys, numpy.uint8).reshape(-1, 16)``).

Keys(keys=()) makes one from a sequence of 16-byte bytes objects, or from a
bytes-like object of 16 bytes per key (``Keys(bytes(k)) == k``).)");
  keys_type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  cls.def(
         "__init__", [](PyKeys* self, nb::handle keys) { new (self) PyKeys(KeysFrom(keys)); },
         nb::arg("keys") = nb::tuple(),
         nb::sig("def __init__(self, keys: collections.abc.Sequence[bytes] | "
                 "typing_extensions.Buffer = ()) -> None"))
      .def("__len__", &PyKeys::size)
      .def(
          "__getitem__", [](const PyKeys& k, int64_t i) { return Item(k, Index(k, i)); },
          nb::arg("index"), "Key i: 16 bytes.")
      .def("__getitem__", &Slice, nb::arg("index"),
           nb::sig("def __getitem__(self, index: slice) -> Keys"),
           "Keys of a slice; a step of 1 shares the buffer.")
      .def(
          "__iter__",
          [](nb::handle self) {
            return KeysIterator{nb::borrow(self), 0};
          },
          nb::sig("def __iter__(self) -> collections.abc.Iterator[bytes]"))
      .def(
          "__contains__", [](const PyKeys& k, nb::handle key) { return Find(k, key) < k.size(); },
          nb::sig("def __contains__(self, key: object, /) -> bool"))
      .def(
          "index",
          [](const PyKeys& k, nb::handle key) {
            const size_t i = Find(k, key);
            if (i == k.size()) throw nb::value_error("the key is not in these keys");
            return i;
          },
          nb::arg("key"), nb::sig("def index(self, key: object, /) -> int"),
          "The position of the first occurrence of key; ValueError if none.")
      .def(
          "count",
          [](const PyKeys& k, nb::handle key) {
            size_t n = 0;
            for (size_t i = Find(k, key); i < k.size(); i = Find(k, key, i + 1)) ++n;
            return n;
          },
          nb::arg("key"), nb::sig("def count(self, key: object, /) -> int"),
          "How many times key occurs.")
      .def("__eq__", &Equal, nb::sig("def __eq__(self, other: object, /) -> bool"))
      .def("__hash__", [](const PyKeys& k) { return nb::hash(AllBytes(k)); })
      .def(
          "__add__",
          [](const PyKeys& a, nb::handle b) {
            const PyKeys other = KeysFrom(b);
            nb::bytes out = NewBuffer(a.size() + other.size());
            std::memcpy(Mutable(out), a.data(), a.size() * kKeyBytes);
            std::memcpy(Mutable(out) + a.size() * kKeyBytes, other.data(),
                        other.size() * kKeyBytes);
            return PyKeys(std::move(out), 0, a.size() + other.size());
          },
          nb::sig("def __add__(self, other: Keys | collections.abc.Sequence[bytes], /) -> Keys"),
          "The keys of both, in one new buffer.")
      .def("__bytes__", &AllBytes, "The keys' 16 bytes each, back to back.")
      .def("__repr__", &Repr)
      .def("__reduce__", [](nb::handle self) {
        return nb::make_tuple(self.type(), nb::make_tuple(AllBytes(AsKeys(self))));
      });
}

}  // namespace kvtier::python
