// part.cpp: reads of parts of stored tensors for shim.h (spx_tensor_file_*).
//
// MLX reads weights lazily through its Load primitive, which asks an
// io::Reader for one array's bytes at one offset: on the CPU into the array's
// memory, on CUDA into a host buffer then copied to device memory (never
// managed memory). libmlx does not export Load's constructor, but it does
// export load_safetensors(reader): so a part is shown to MLX as a small
// virtual safetensors file (a header naming one tensor of the part's shape
// and dtype, then the part's bytes) whose reads this reader maps onto the
// byte ranges of the real file that hold the part. A range of rows is one
// byte range; a range of columns is one per row (a block each). The part
// alone is ever held; the file's pages read are those holding the part.

#include "shim.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "mlx/io.h"
#include "mlx/io/load.h"

namespace {

// tensor_file is an open weights file; parts share it through shared_ptr,
// so the descriptor lives as long as the last lazy part that may read it.
struct tensor_file {
  int fd = -1;
  std::string path;
  uint64_t size = 0;
  ~tensor_file() {
    if (fd >= 0) {
      ::close(fd);
    }
  }
};

std::shared_ptr<tensor_file>& file_of(spx_tensor_file f) {
  if (f.ctx == nullptr) {
    throw std::invalid_argument("mlx shim: empty tensor file handle");
  }
  return *static_cast<std::shared_ptr<tensor_file>*>(f.ctx);
}

// pread_all reads n bytes at off, or throws naming the file: a short read
// means the file changed after the loader validated it.
void pread_all(const tensor_file& f, char* data, size_t n, uint64_t off) {
  while (n > 0) {
    ssize_t got = ::pread(f.fd, data, std::min<size_t>(n, size_t(1) << 30), static_cast<off_t>(off));
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got <= 0) {
      std::ostringstream msg;
      msg << "reading " << n << " bytes at offset " << off << " of " << f.path << ": "
          << (got < 0 ? std::strerror(errno) : "unexpected end of file (was it changed while loading?)");
      throw std::runtime_error(msg.str());
    }
    data += got;
    n -= static_cast<size_t>(got);
    off += static_cast<uint64_t>(got);
  }
}

// part_reader is the virtual safetensors file of one part: head_ (length,
// JSON header), then blocks_ blocks of the ranges' bytes.
class part_reader : public mx::io::Reader {
 public:
  static constexpr uint64_t kPage = 4096;          // gaps shorter than this are read across
  static constexpr uint64_t kWindow = 4ull << 20;  // the most one run reads through scratch
  static constexpr size_t kChunk = 16ull << 20;    // a read of 2 chunks or more is split
  static constexpr size_t kThreads = 8;            // into at most this many threads

  part_reader(std::shared_ptr<tensor_file> file, std::string head, uint64_t offset,
              uint64_t blocks, uint64_t stride, std::vector<uint64_t> starts,
              std::vector<uint64_t> lens)
      : file_(std::move(file)),
        head_(std::move(head)),
        offset_(offset),
        blocks_(blocks),
        stride_(stride),
        starts_(std::move(starts)),
        lens_(std::move(lens)) {
    for (auto l : lens_) {
      block_bytes_ += l;
    }
  }

  bool is_open() const override { return file_->fd >= 0; }
  bool good() const override { return is_open(); }
  size_t tell() override { return pos_; }

  void seek(int64_t off, std::ios_base::seekdir way = std::ios_base::beg) override {
    if (way == std::ios_base::end) {
      pos_ = size() + off;
    } else if (way == std::ios_base::cur) {
      pos_ += off;
    } else {
      pos_ = off;
    }
  }

  void read(char* data, size_t n) override {
    read(data, n, pos_);
    pos_ += n;
  }

  // read copies the header's bytes and reads the part's from the file. A
  // large read is split into chunks read by threads of its own, as MLX's
  // ParallelFileReader does (not MLX's pools, whose tasks may be waiting on
  // this read): Load on CUDA reads one array at a time, and a disk serves
  // several requests at once faster than one (a column part of a 5120-row
  // weight is 5120 reads).
  void read(char* data, size_t n, size_t offset) override {
    if (offset > size() || n > size() - offset) {
      throw std::runtime_error("mlx shim: read past the end of a part of " + file_->path);
    }
    size_t chunks = std::min<size_t>(kThreads, n / kChunk);
    if (chunks < 2) {
      read_serial(data, n, offset);
      return;
    }
    size_t step = (n + chunks - 1) / chunks;
    std::vector<std::future<void>> done;
    for (size_t at = 0; at < n; at += step) {
      size_t len = std::min(step, n - at);
      done.push_back(std::async(std::launch::async, [=, this] { read_serial(data + at, len, offset + at); }));
    }
    for (auto& d : done) {
      d.get();  // rethrows a chunk's failure
    }
  }

  std::string label() const override { return "part of file " + file_->path; }

 private:
  // read_serial is read on this thread. Consecutive pieces whose gaps are
  // shorter than a page are read as one run through a scratch buffer (a few
  // MiB at most): such a gap holds no whole page, so reading across it
  // costs no disk read that the pieces did not already need, and it spares
  // a system call per piece (a range of columns of a stacked expert weight
  // is millions of short pieces). Longer gaps are skipped; the part never
  // passes through more memory than its own and one window per thread.
  void read_serial(char* data, size_t n, size_t offset) const {
    if (offset < head_.size()) {
      size_t k = std::min(n, head_.size() - offset);
      std::memcpy(data, head_.data() + offset, k);
      data += k;
      n -= k;
      offset += k;
    }
    if (n == 0) {
      return;
    }
    uint64_t v = offset - head_.size();
    uint64_t b = v / block_bytes_, w = v % block_bytes_;
    size_t j = 0;
    while (w >= lens_[j]) {
      w -= lens_[j++];
    }
    struct piece {
      char* dst;
      uint64_t off, len;
    };
    std::vector<piece> run;
    std::vector<char> scratch;
    auto flush = [&] {
      if (run.size() == 1) {
        pread_all(*file_, run[0].dst, run[0].len, run[0].off);
      } else if (!run.empty()) {
        uint64_t first = run.front().off;
        scratch.resize(run.back().off + run.back().len - first);
        pread_all(*file_, scratch.data(), scratch.size(), first);
        for (const auto& p : run) {
          std::memcpy(p.dst, scratch.data() + (p.off - first), p.len);
        }
      }
      run.clear();
    };
    while (n > 0) {
      uint64_t take = std::min<uint64_t>(n, lens_[j] - w);
      uint64_t off = offset_ + b * stride_ + starts_[j] + w;
      if (!run.empty()) {
        uint64_t end = run.back().off + run.back().len;
        if (off < end || off - end >= kPage || off + take - run.front().off > kWindow) {
          flush();
        }
      }
      run.push_back({data, off, take});
      data += take;
      n -= take;
      w = 0;
      if (++j == lens_.size()) {
        j = 0;
        ++b;
      }
    }
    flush();
  }

  size_t size() const { return head_.size() + blocks_ * block_bytes_; }

  std::shared_ptr<tensor_file> file_;
  std::string head_;
  uint64_t offset_, blocks_, stride_;
  std::vector<uint64_t> starts_, lens_;
  uint64_t block_bytes_ = 0;
  size_t pos_ = 0;
};

// part_header is the virtual file's head: the 8-byte little-endian header
// length, then a JSON header naming the one tensor "part", padded with
// spaces to a multiple of 8 as safetensors writers do.
std::string part_header(const char* dtype, const int* shape, int ndim, uint64_t nbytes) {
  std::ostringstream js;
  js << "{\"part\":{\"dtype\":\"" << dtype << "\",\"shape\":[";
  for (int i = 0; i < ndim; ++i) {
    js << (i ? "," : "") << shape[i];
  }
  js << "],\"data_offsets\":[0," << nbytes << "]}}";
  std::string json = js.str();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string head(8, '\0');
  uint64_t len = json.size();
  for (int i = 0; i < 8; ++i) {
    head[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  }
  return head + json;
}

}  // namespace

extern "C" {

int spx_tensor_file_open(spx_tensor_file* out, const char* path) {
  SPX_TRY
  auto f = std::make_shared<tensor_file>();
  f->path = path;
  f->fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (f->fd < 0) {
    throw std::runtime_error(std::string("opening ") + path + ": " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(f->fd, &st) != 0) {
    throw std::runtime_error(std::string("stat of ") + path + ": " + std::strerror(errno));
  }
  f->size = static_cast<uint64_t>(st.st_size);
  out->ctx = new std::shared_ptr<tensor_file>(std::move(f));
  SPX_CATCH
}

// spx_tensor_file_free may run on any thread (a checkpoint is closed where
// its owner is done with it): it touches no MLX state, and the descriptor
// closes with the last part that holds it.
int spx_tensor_file_free(spx_tensor_file f) {
  delete static_cast<std::shared_ptr<tensor_file>*>(f.ctx);
  return SPX_OK;
}

int spx_tensor_file_load(spx_array* out, spx_tensor_file f, const char* dtype,
                         const int* shape, int ndim, uint64_t offset,
                         uint64_t blocks, uint64_t stride,
                         const uint64_t* starts, const uint64_t* lens,
                         size_t nranges, spx_stream s) {
  SPX_TRY
  auto& file = file_of(f);
  std::vector<uint64_t> st(starts, starts + nranges), ln(lens, lens + nranges);
  // Every byte the reader may ask for must lie in the file (the caller
  // derived the ranges from a validated header; this guards the arithmetic).
  uint64_t block_bytes = 0, end = 0, last = 0;
  for (size_t j = 0; j < nranges; ++j) {
    if (ln[j] == 0 || __builtin_add_overflow(block_bytes, ln[j], &block_bytes) ||
        __builtin_add_overflow(st[j], ln[j], &end)) {
      throw std::invalid_argument("mlx shim: an empty or overflowing byte range of a part of " + file->path);
    }
    last = std::max(last, end);
  }
  uint64_t nbytes = 0, reach = 0;
  if (nranges == 0 || blocks == 0 || __builtin_mul_overflow(blocks, block_bytes, &nbytes) ||
      __builtin_mul_overflow(blocks - 1, stride, &reach) || __builtin_add_overflow(reach, last, &reach) ||
      __builtin_add_overflow(reach, offset, &reach) || reach > file->size) {
    std::ostringstream msg;
    msg << "mlx shim: a part of " << file->path << " (" << blocks << " blocks of stride " << stride
        << " from offset " << offset << ") does not lie within the file's " << file->size << " bytes";
    throw std::invalid_argument(msg.str());
  }
  auto reader = std::make_shared<part_reader>(file, part_header(dtype, shape, ndim, nbytes), offset,
                                              blocks, stride, std::move(st), std::move(ln));
  auto loaded = mx::load_safetensors(reader, stream(s));
  assign(out, mx::array(loaded.first.at("part")));
  SPX_CATCH
}

}  // extern "C"
