// bench_client: the lab guest's measuring client. C so that its own cost (the floor,
// measured on the routed path in the same run) stays far below what it measures.
// Every mode is bounded in count and time. Output is one JSON line (or, for `hold`,
// "ready OK ERRORS" then "closed").
//   lat  IP PORT N TIMEOUT_MS        N sequential connections: connect, send a GET,
//                                    time until the first response byte
//   hold IP PORT N MAX_SECONDS       open N connections (for at most MAX_SECONDS),
//                                    each confirmed end to end ('H' -> 'h'), hold
//                                    them idle until a line on stdin (or MAX_SECONDS
//                                    more), then close them
//   dns  IP PORT N WINDOW TIMEOUT_MS N UDP DNS queries (A bench.lab), WINDOW in flight
//   who  IP PORT                     the address the server saw the connection from
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static struct sockaddr_in parse_addr(const char* ip, const char* port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
  if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
    fprintf(stderr, "bad address %s\n", ip);
    exit(2);
  }
  return a;
}

static int cmp_i64(const void* a, const void* b) {
  int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
  return (x > y) - (x < y);
}

// Nearest-rank percentile of sorted samples, in microseconds.
static double pct_us(const int64_t* sorted, int n, double p) {
  if (n == 0) return -1;
  int k = (int)(p * n + 0.999999) - 1;
  if (k < 0) k = 0;
  if (k >= n) k = n - 1;
  return sorted[k] / 1000.0;
}

static int64_t one_request(const struct sockaddr_in* a, int timeout_ms) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  static const char req[] = "GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n";
  int64_t t0 = now_ns(), dt = -1;
  char buf[512];
  if (connect(fd, (const struct sockaddr*)a, sizeof *a) == 0 &&
      write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1) && read(fd, buf, 1) == 1) {
    dt = now_ns() - t0;
    while (read(fd, buf, sizeof buf) > 0) {
    }  // drain to EOF so the close is orderly
  }
  close(fd);
  return dt;
}

static int mode_lat(char** argv) {
  struct sockaddr_in a = parse_addr(argv[0], argv[1]);
  int n = atoi(argv[2]), timeout_ms = atoi(argv[3]), ok = 0, errors = 0;
  int64_t* s = calloc((size_t)n, sizeof *s);
  int64_t t0 = now_ns(), sum = 0;
  for (int i = 0; i < n; i++) {
    int64_t dt = one_request(&a, timeout_ms);
    if (dt < 0) {
      errors++;
      continue;
    }
    s[ok++] = dt;
    sum += dt;
  }
  double elapsed = (now_ns() - t0) / 1e9;
  qsort(s, (size_t)ok, sizeof *s, cmp_i64);
  printf("{\"n\":%d,\"ok\":%d,\"errors\":%d,\"elapsed_s\":%.6f,\"p50_us\":%.1f,"
         "\"p99_us\":%.1f,\"mean_us\":%.1f,\"max_us\":%.1f}\n",
         n, ok, errors, elapsed, pct_us(s, ok, 0.50), pct_us(s, ok, 0.99),
         ok ? sum / 1000.0 / ok : -1, pct_us(s, ok, 1.0));
  return 0;
}

enum { kConnecting = 1, kAwaitingEcho = 2, kHeld = 3, kFailed = 4 };

static int mode_hold(char** argv) {
  struct sockaddr_in a = parse_addr(argv[0], argv[1]);
  int n = atoi(argv[2]), max_s = atoi(argv[3]);
  int* fds = calloc((size_t)n, sizeof *fds);
  unsigned char* st = calloc((size_t)n, 1);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  int next = 0, pending = 0, held = 0, failed = 0;
  const int max_pending = 256;
  int64_t deadline = now_ns() + (int64_t)max_s * 1000000000;
  struct epoll_event evs[256];
  while (held + failed < n && now_ns() < deadline) {
    while (pending < max_pending && next < n) {
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0 || (connect(fd, (struct sockaddr*)&a, sizeof a) != 0 && errno != EINPROGRESS)) {
        if (fd >= 0) close(fd);
        st[next++] = kFailed;
        failed++;
        continue;
      }
      fds[next] = fd;
      st[next] = kConnecting;
      struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN, .data.u32 = (uint32_t)next};
      epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
      next++;
      pending++;
    }
    int k = epoll_wait(ep, evs, 256, 100);
    for (int i = 0; i < k; i++) {
      uint32_t id = evs[i].data.u32;
      int fd = fds[id];
      int err = 0;
      socklen_t len = sizeof err;
      char c = 0;
      if (st[id] == kConnecting && (evs[i].events & EPOLLOUT)) {
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0 && write(fd, "H", 1) == 1) {
          st[id] = kAwaitingEcho;
          struct epoll_event ev = {.events = EPOLLIN, .data.u32 = id};
          epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
          continue;
        }
      } else if (st[id] == kAwaitingEcho) {
        ssize_t r = read(fd, &c, 1);
        if (r < 0 && errno == EAGAIN) continue;
        if (r == 1 && c == 'h') {
          st[id] = kHeld;
          epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
          held++;
          pending--;
          continue;
        }
      }
      st[id] = kFailed;
      epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
      close(fd);
      failed++;
      pending--;
    }
  }
  printf("ready %d %d\n", held, n - held);
  fflush(stdout);
  // Held for up to MAX_SECONDS more, however long opening them took: the caller reads
  // its figures after "ready" and must find them still open.
  struct pollfd p = {.fd = 0, .events = POLLIN};
  poll(&p, 1, max_s * 1000);
  for (int i = 0; i < n; i++)
    if (st[i] == kHeld || st[i] == kAwaitingEcho || st[i] == kConnecting) close(fds[i]);
  printf("closed\n");
  return 0;
}

static size_t dns_query(unsigned char* q, uint16_t id) {
  static const unsigned char tail[] = {1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 5, 'b', 'e', 'n', 'c',
                                       'h', 3, 'l', 'a', 'b', 0, 0, 1, 0, 1};
  q[0] = (unsigned char)(id >> 8);
  q[1] = (unsigned char)id;
  memcpy(q + 2, tail, sizeof tail);
  return 2 + sizeof tail;
}

static int mode_dns(char** argv) {
  struct sockaddr_in a = parse_addr(argv[0], argv[1]);
  int n = atoi(argv[2]), window = atoi(argv[3]), timeout_ms = atoi(argv[4]);
  if (n > 65536) n = 65536;  // ids index the send times
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (connect(fd, (struct sockaddr*)&a, sizeof a) != 0) return 1;
  int64_t* sent = calloc((size_t)n, sizeof *sent);
  int64_t* lat = calloc((size_t)n, sizeof *lat);
  unsigned char* done = calloc((size_t)n, 1);
  int next = 0, oldest = 0, inflight = 0, answered = 0, lost = 0;
  int64_t t0 = now_ns();
  unsigned char buf[1500];
  while (answered + lost < n) {
    while (inflight < window && next < n) {
      size_t len = dns_query(buf, (uint16_t)next);
      sent[next] = now_ns();
      if (send(fd, buf, len, 0) != (ssize_t)len) {
        done[next++] = 2;
        lost++;
        continue;
      }
      next++;
      inflight++;
    }
    struct pollfd p = {.fd = fd, .events = POLLIN};
    poll(&p, 1, 20);
    ssize_t r;
    while ((r = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) >= 12) {
      int id = (buf[0] << 8) | buf[1];
      if (id >= n || done[id] || sent[id] == 0) continue;
      done[id] = 1;
      lat[answered++] = now_ns() - sent[id];
      inflight--;
    }
    int64_t t = now_ns();
    while (oldest < next && (done[oldest] || sent[oldest] + (int64_t)timeout_ms * 1000000 < t)) {
      if (!done[oldest]) {
        done[oldest] = 2;
        lost++;
        inflight--;
      }
      oldest++;
    }
  }
  double elapsed = (now_ns() - t0) / 1e9;
  qsort(lat, (size_t)answered, sizeof *lat, cmp_i64);
  printf("{\"n\":%d,\"answered\":%d,\"lost\":%d,\"elapsed_s\":%.6f,\"qps\":%.1f,"
         "\"p50_us\":%.1f,\"p99_us\":%.1f}\n",
         n, answered, lost, elapsed, answered / elapsed, pct_us(lat, answered, 0.5),
         pct_us(lat, answered, 0.99));
  return 0;
}

// Prints the address the server saw this connection come from.
static int mode_who(char** argv) {
  struct sockaddr_in a = parse_addr(argv[0], argv[1]);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct timeval tv = {.tv_sec = 3};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[64] = {0};
  ssize_t n = -1;
  if (connect(fd, (struct sockaddr*)&a, sizeof a) == 0 && write(fd, "W", 1) == 1)
    n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 1;
  fputs(buf, stdout);
  return 0;
}

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc == 6 && strcmp(argv[1], "lat") == 0) return mode_lat(argv + 2);
  if (argc == 6 && strcmp(argv[1], "hold") == 0) return mode_hold(argv + 2);
  if (argc == 7 && strcmp(argv[1], "dns") == 0) return mode_dns(argv + 2);
  if (argc == 4 && strcmp(argv[1], "who") == 0) return mode_who(argv + 2);
  fprintf(stderr,
          "usage: %s lat IP PORT N TIMEOUT_MS | hold IP PORT N MAX_SECONDS |"
          " dns IP PORT N WINDOW TIMEOUT_MS | who IP PORT\n",
          argv[0]);
  return 2;
}
