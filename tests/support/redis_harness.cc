#include "support/redis_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

namespace kvtier::testing {
namespace {

bool PortFree(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// A port whose cluster bus (port + 10000) is free too.
uint16_t PickPort(const std::vector<uint16_t>& taken) {
  static std::mt19937 rng(static_cast<unsigned>(::getpid()) * 7919u +
                          static_cast<unsigned>(std::random_device{}()));
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int p = 20000 + static_cast<int>(rng() % 25000);
    bool used = false;
    for (uint16_t t : taken) used = used || t == p;
    if (!used && PortFree(p) && PortFree(p + 10000)) return static_cast<uint16_t>(p);
  }
  return 0;
}

// The openssl configuration for the harness' certificates, so they do not
// depend on the system's openssl.cnf: a CA, and leaves (no extended key
// usage: a node presents its server certificate as a client on the cluster
// bus and to its master).
constexpr char kOpensslConfig[] = R"([req]
distinguished_name = dn
prompt = no
x509_extensions = ca
[dn]
CN = kvtier test
[ca]
basicConstraints = critical, CA:true
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = CA:false
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = CA:false
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
)";

// The openssl commands that make <name>.key (EC P-256, small and fast) and
// <name>.crt in the current directory: a self-signed CA when `ca` is empty,
// else a leaf with the extensions of `section`, signed by <ca>.
std::string CertCommands(const std::string& name, const std::string& cn, const std::string& ca,
                         const std::string& section) {
  const std::string req =
      "openssl req -config openssl.cnf -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
      "-keyout " +
      name + ".key -subj '/CN=" + cn + "'";
  if (ca.empty()) return req + " -x509 -days 7 -out " + name + ".crt";
  return req + " -out " + name + ".csr && openssl x509 -req -in " + name + ".csr -CA " + ca +
         ".crt -CAkey " + ca + ".key -CAcreateserial -days 7 -extfile openssl.cnf -extensions " +
         section + " -out " + name + ".crt";
}

}  // namespace

bool RedisHarness::MakeCertificates(bool rogue_server_cert) {
  if (Shell("command -v openssl").first != 0) {
    std::cerr << "redis harness: tls needs the openssl command-line tool, not found on PATH\n";
    return false;
  }
  const std::string dir = dir_ / "tls";
  std::error_code ec;
  std::filesystem::create_directory(dir, ec);
  std::ofstream(dir + "/openssl.cnf") << kOpensslConfig;
  const std::string script = "(cd '" + dir + "' && " +
                             CertCommands("ca", "kvtier test CA", "", "") + " && " +
                             CertCommands("server", "localhost", "ca", "server") + " && " +
                             CertCommands("client", "kvtier test client", "ca", "client") + " && " +
                             CertCommands("rogue-ca", "kvtier rogue CA", "", "") + " && " +
                             CertCommands("rogue-server", "localhost", "rogue-ca", "server") +
                             " && cat ca.crt rogue-ca.crt > nodes-ca.crt)";
  const auto [code, out] = Shell(script);
  if (code != 0) {
    std::cerr << "redis harness: making the TLS certificates with openssl failed:\n" << out << "\n";
    return false;
  }
  // The rogue server certificate verifies only against the rogue CA; the
  // nodes (each other's clients) and the harness trust both.
  trusted_ca_ = TlsFile(rogue_server_cert ? "nodes-ca.crt" : "ca.crt");
  node_cert_ = TlsFile(rogue_server_cert ? "rogue-server.crt" : "server.crt");
  node_key_ = TlsFile(rogue_server_cert ? "rogue-server.key" : "server.key");
  return true;
}

std::unique_ptr<RedisHarness> RedisHarness::Start(const RedisClusterSpec& spec) {
  auto h = std::unique_ptr<RedisHarness>(new RedisHarness());
  if (!spec.acl_user.empty() && spec.acl_password.empty()) {
    std::cerr << "redis harness: acl_user needs an acl_password\n";
    return nullptr;
  }
  h->acl_user_ = spec.acl_user;
  h->acl_password_ = spec.acl_password;
  h->tls_ = spec.tls;
  if (spec.tls && !h->MakeCertificates(spec.rogue_server_cert)) return nullptr;
  const size_t n =
      spec.cluster ? static_cast<size_t>(spec.masters * (1 + spec.replicas_per_master)) : 1;
  for (size_t i = 0; i < n; ++i) {
    const uint16_t p = PickPort(h->ports_);
    if (p == 0) {
      std::cerr << "redis harness: no free port\n";
      return nullptr;
    }
    h->ports_.push_back(p);
    h->pids_.push_back(-1);
    if (!h->StartNode(i, spec)) return nullptr;
  }
  for (size_t i = 0; i < n; ++i) {
    bool up = false;
    // A node that exits at once lost its port to another test process
    // between PickPort's check and its bind: it gets another port (three
    // times at most). One that stays up is given 10 s (a loaded machine).
    for (int t = 0, restarts = 0; t < 400 && !up; ++t) {
      up = h->Cli(static_cast<int>(i), {"PING"}).find("PONG") != std::string::npos;
      if (up) break;
      int status = 0;
      if (restarts < 3 && ::waitpid(h->pids_[i], &status, WNOHANG) == h->pids_[i]) {
        ++restarts;
        const uint16_t p = PickPort(h->ports_);
        if (p == 0) break;
        h->ports_[i] = p;
        if (!h->StartNode(i, spec)) break;
        continue;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    if (!up) {
      std::cerr << "redis harness: node " << h->address(static_cast<int>(i))
                << " did not answer PING\n";
      return nullptr;
    }
  }
  if (!spec.cluster) return h;
  std::vector<std::string> create = h->CliCommand();
  create.insert(create.end(), {"--cluster", "create"});
  for (size_t i = 0; i < n; ++i) create.push_back(h->address(static_cast<int>(i)));
  create.push_back("--cluster-replicas");
  create.push_back(std::to_string(spec.replicas_per_master));
  create.push_back("--cluster-yes");
  int status = 0;
  const std::string out = RunCapture(create, &status);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::cerr << "redis harness: redis-cli --cluster create failed:\n" << out << "\n";
    return nullptr;
  }
  if (!h->WaitHealthy()) {
    std::cerr << "redis harness: the cluster did not become healthy\n";
    return nullptr;
  }
  return h;
}

bool RedisHarness::StartNode(size_t i, const RedisClusterSpec& spec) {
  const std::string port = std::to_string(ports_[i]);
  std::vector<std::string> args = {"redis-server", "--bind", "127.0.0.1", "--dir", dir_.path(),
                                   "--save", "", "--appendonly", "no", "--protected-mode", "no",
                                   "--daemonize", "no", "--logfile", "",
                                   // A replica syncs at once (the default waits 5 s for
                                   // more replicas), so a failover test starts synced.
                                   "--repl-diskless-sync-delay", "0"};
  if (tls_) {
    // The cluster bus listens on the TLS port + 10000 then.
    args.insert(args.end(),
                {"--port", "0", "--tls-port", port, "--tls-cert-file", node_cert_, "--tls-key-file",
                 node_key_, "--tls-ca-cert-file", trusted_ca_, "--tls-auth-clients", "yes",
                 "--tls-cluster", "yes", "--tls-replication", "yes"});
  } else {
    args.insert(args.end(), {"--port", port});
  }
  if (!acl_user_.empty()) {
    args.insert(args.end(),
                {"--user", acl_user_, "on", ">" + acl_password_, "~*", "&*", "+@all", "--user",
                 "default", "off", "--masteruser", acl_user_, "--masterauth", acl_password_});
  }
  if (spec.cluster) {
    args.insert(args.end(),
                {"--cluster-enabled", "yes", "--cluster-config-file", "nodes-" + port + ".conf",
                 "--cluster-node-timeout", std::to_string(spec.node_timeout_ms)});
  }
  if (!spec.maxmemory.empty()) {
    args.insert(args.end(),
                {"--maxmemory", spec.maxmemory, "--maxmemory-policy", spec.maxmemory_policy});
  }
  pids_[i] = SpawnLogged(args, dir_ / ("node-" + port + ".log"));
  return pids_[i] > 0;
}

RedisHarness::~RedisHarness() { KillAll(); }  // dir_ goes after

std::string RedisHarness::address(int node) const {
  return "127.0.0.1:" + std::to_string(port(node));
}

std::vector<std::string> RedisHarness::seeds() const {
  std::vector<std::string> out;
  for (int i = 0; i < nodes(); ++i) out.push_back(address(i));
  return out;
}

std::string RedisHarness::seed_list() const {
  std::string out;
  for (const std::string& s : seeds()) out += (out.empty() ? "" : ",") + s;
  return out;
}

std::string RedisHarness::TlsFile(const std::string& name) const { return dir_ / ("tls/" + name); }

std::string RedisHarness::ca_file() const { return tls_ ? TlsFile("ca.crt") : ""; }
std::string RedisHarness::client_cert_file() const { return tls_ ? TlsFile("client.crt") : ""; }
std::string RedisHarness::client_key_file() const { return tls_ ? TlsFile("client.key") : ""; }
std::string RedisHarness::rogue_ca_file() const { return tls_ ? TlsFile("rogue-ca.crt") : ""; }

std::vector<std::string> RedisHarness::CliCommand() const {
  std::vector<std::string> argv = {"redis-cli"};
  if (tls_) {
    argv.insert(argv.end(), {"--tls", "--cacert", trusted_ca_, "--cert", client_cert_file(),
                             "--key", client_key_file()});
  }
  if (!acl_user_.empty()) {
    argv.insert(argv.end(), {"--user", acl_user_, "--pass", acl_password_, "--no-auth-warning"});
  }
  return argv;
}

std::string RedisHarness::Cli(int node, const std::vector<std::string>& args) const {
  std::vector<std::string> argv = CliCommand();
  argv.insert(argv.end(), {"-p", std::to_string(port(node))});
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCapture(argv);
}

std::string RedisHarness::ClusterCli(const std::vector<std::string>& args) const {
  for (int i = 0; i < nodes(); ++i) {
    if (!alive(i)) continue;
    std::vector<std::string> argv = CliCommand();
    argv.insert(argv.end(), {"-c", "-p", std::to_string(port(i))});
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCapture(argv);
  }
  return "";
}

void RedisHarness::Kill(int node) {
  pid_t& pid = pids_[static_cast<size_t>(node)];
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  pid = -1;
}

void RedisHarness::KillAll() {
  for (int i = 0; i < nodes(); ++i) Kill(i);
}

int RedisHarness::MasterOf(uint16_t slot) const {
  for (int i = 0; i < nodes(); ++i) {
    if (!alive(i)) continue;
    const std::string out = Cli(i, {"CLUSTER", "SLOTS"});
    // redis-cli prints each range as lines: first, last, host, port, id, ...
    std::istringstream in(out);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    for (size_t k = 0; k + 3 < lines.size(); ++k) {
      char* end = nullptr;
      const long first = std::strtol(lines[k].c_str(), &end, 10);
      if (end == lines[k].c_str() || *end != '\0') continue;
      const long last = std::strtol(lines[k + 1].c_str(), &end, 10);
      if (*end != '\0' || first > slot || last < slot) continue;
      const std::string port_text = lines[k + 3];
      for (int j = 0; j < nodes(); ++j) {
        if (std::to_string(port(j)) == port_text) return j;
      }
    }
    return -1;
  }
  return -1;
}

bool RedisHarness::WaitHealthy(int seconds) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    bool ok = true;
    for (int i = 0; i < nodes() && ok; ++i) {
      if (!alive(i)) continue;
      ok = Cli(i, {"CLUSTER", "INFO"}).find("cluster_state:ok") != std::string::npos;
      // A replica counts once it has its master's data.
      const std::string repl = Cli(i, {"INFO", "replication"});
      if (ok && repl.find("role:slave") != std::string::npos) {
        ok = repl.find("master_link_status:up") != std::string::npos;
      }
    }
    if (ok) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

std::string RedisHarness::NodeId(int node) const {
  std::string id = Cli(node, {"CLUSTER", "MYID"});
  while (!id.empty() && (id.back() == '\n' || id.back() == '\r')) id.pop_back();
  return id;
}

bool RedisHarness::Reshard(int from, int to, int count) const {
  std::vector<std::string> argv = CliCommand();
  argv.insert(argv.end(), {"--cluster", "reshard", address(from), "--cluster-from", NodeId(from),
                           "--cluster-to", NodeId(to), "--cluster-slots", std::to_string(count),
                           "--cluster-yes", "--cluster-pipeline", "10"});
  int status = 0;
  RunCapture(argv, &status);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace kvtier::testing
