#include "ledger/chain.h"

#include <algorithm>
#include <memory>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include <openssl/evp.h>
#include <openssl/pem.h>

namespace arbiter::ledger {
namespace {

std::string Escape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == ';' || c == '=' || c == '\n') out += '\\';
    out += c == '\n' ? 'n' : c;
  }
  return out;
}

std::string Hex(const unsigned char* data, size_t size) {
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(data), size));
}

struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

std::unique_ptr<EVP_PKEY, KeyDeleter> ReadKey(absl::string_view pem, bool is_private) {
  std::unique_ptr<BIO, BioDeleter> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return nullptr;
  EVP_PKEY* key = is_private ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr)
                             : PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr);
  std::unique_ptr<EVP_PKEY, KeyDeleter> out(key);
  if (out != nullptr && EVP_PKEY_id(out.get()) != EVP_PKEY_ED25519) return nullptr;
  return out;
}

void Fail(Verdict& v, int64_t seq, std::string problem) {
  v.ok = false;
  v.first_bad_seq = seq;
  v.problem = std::move(problem);
}

}  // namespace

std::string Payload(std::vector<std::pair<std::string, std::string>> fields) {
  std::sort(fields.begin(), fields.end());
  return absl::StrJoin(fields, ";", [](std::string* out, const auto& kv) {
    absl::StrAppend(out, Escape(kv.first), "=", Escape(kv.second));
  });
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParsePayload(
    absl::string_view payload) {
  std::vector<std::pair<std::string, std::string>> fields;
  if (payload.empty()) return fields;
  std::string key;
  std::string value;
  bool in_value = false;
  auto end_field = [&]() -> absl::Status {
    if (!in_value) {
      return absl::InvalidArgumentError(absl::StrCat("payload: field \"", key, "\" has no ="));
    }
    fields.emplace_back(std::move(key), std::move(value));
    key.clear();
    value.clear();
    in_value = false;
    return absl::OkStatus();
  };
  for (size_t i = 0; i < payload.size(); ++i) {
    char c = payload[i];
    if (c == '\\') {
      if (++i == payload.size()) return absl::InvalidArgumentError("payload: ends in a backslash");
      c = payload[i] == 'n' ? '\n' : payload[i];
    } else if (c == ';') {
      if (absl::Status s = end_field(); !s.ok()) return s;
      continue;
    } else if (c == '=' && !in_value) {
      in_value = true;
      continue;
    }
    (in_value ? value : key) += c;
  }
  if (absl::Status s = end_field(); !s.ok()) return s;
  return fields;
}

std::string Canonical(const Entry& e) {
  return absl::StrCat(e.seq, "\n", absl::ToUnixMicros(e.at), "\n", Escape(e.actor), "\n",
                      Escape(e.action), "\n", Escape(e.subject), "\n", e.payload);
}

std::string Sha256Hex(absl::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(text.data(), text.size(), digest, &size, EVP_sha256(), nullptr);
  return Hex(digest, size);
}

std::string HashOf(absl::string_view prev_hash, const Entry& e) {
  return Sha256Hex(absl::StrCat(prev_hash, "\n", Canonical(e)));
}

Verdict VerifyChain(const std::vector<Entry>& entries, int64_t prev_seq,
                    absl::string_view prev_hash) {
  Verdict v;
  v.head_seq = prev_seq;
  v.head_hash = std::string(prev_hash);
  Continue(v, entries);
  return v;
}

void Continue(Verdict& v, const std::vector<Entry>& entries) {
  for (const Entry& e : entries) {
    if (!v.ok) return;
    const int64_t want = v.head_seq + 1;
    if (e.seq != want) {
      Fail(v, want,
           e.seq > want ? absl::StrCat("entry ", want, " is missing (next stored is ", e.seq, ")")
                        : absl::StrCat("entry ", e.seq, " appears again after ", v.head_seq));
      return;
    }
    if (e.prev_hash != v.head_hash) {
      Fail(v, e.seq,
           absl::StrCat("entry ", e.seq, " does not link to entry ", v.head_seq,
                        " (moved, replaced or reordered)"));
      return;
    }
    if (HashOf(e.prev_hash, e) != e.hash) {
      Fail(v, e.seq, absl::StrCat("entry ", e.seq, "'s contents do not match its hash (altered)"));
      return;
    }
    v.head_seq = e.seq;
    v.head_hash = e.hash;
    ++v.count;
  }
}

std::string CheckpointMessage(int64_t seq, absl::string_view hash) {
  return absl::StrCat("arbiter-ledger-checkpoint\n", seq, "\n", hash);
}

absl::StatusOr<std::string> Sign(absl::string_view private_key_pem, absl::string_view message) {
  auto key = ReadKey(private_key_pem, /*is_private=*/true);
  if (key == nullptr) return absl::InvalidArgumentError("not an Ed25519 private key (PEM)");
  std::unique_ptr<EVP_MD_CTX, MdCtxDeleter> ctx(EVP_MD_CTX_new());
  unsigned char sig[64];
  size_t size = sizeof(sig);
  if (ctx == nullptr || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), sig, &size, reinterpret_cast<const unsigned char*>(message.data()),
                     message.size()) != 1) {
    return absl::InternalError("Ed25519 signing failed");
  }
  return Hex(sig, size);
}

absl::Status VerifySignature(absl::string_view public_key_pem, absl::string_view message,
                             absl::string_view signature_hex) {
  auto key = ReadKey(public_key_pem, /*is_private=*/false);
  if (key == nullptr) return absl::InvalidArgumentError("not an Ed25519 public key (PEM)");
  const std::string sig = absl::HexStringToBytes(signature_hex);
  std::unique_ptr<EVP_MD_CTX, MdCtxDeleter> ctx(EVP_MD_CTX_new());
  if (ctx == nullptr ||
      EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1 ||
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                       reinterpret_cast<const unsigned char*>(message.data()),
                       message.size()) != 1) {
    return absl::DataLossError("checkpoint signature does not verify");
  }
  return absl::OkStatus();
}

}  // namespace arbiter::ledger
