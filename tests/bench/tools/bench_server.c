// bench_server: the lab's destination for connection benchmarks (runs in the inet
// namespace). One epoll loop, no threads, so its own cost stays small and constant.
//   - A request starting with "GET" gets a tiny HTTP response, then the server closes
//     (what wrk with `Connection: close` and bench_client's `lat` mode expect).
//   - A connection whose first byte is 'H' gets "h" back and is then held open, idle,
//     until the client closes it (bench_client's `hold` mode).
//   - 'W' gets the peer's address back, then a close (bench_client's `who` mode).
// Usage: bench_server IP PORT MAX_SECONDS
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static const char kResponse[] =
    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";

static void on_client(int ep, int fd) {
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof buf);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    close(fd);  // closing also removes it from the epoll set
    return;
  }
  if (buf[0] == 'H') {
    if (write(fd, "h", 1) != 1) close(fd);
    return;
  }
  if (buf[0] == 'W') {
    // "Who is calling": the peer address tells a relayed connection (from the SOCKS
    // server) from one that went around the relay (from the guest).
    struct sockaddr_in peer;
    socklen_t len = sizeof peer;
    char line[64] = "?\n";
    if (getpeername(fd, (struct sockaddr*)&peer, &len) == 0 && inet_ntop(AF_INET, &peer.sin_addr, line, 48))
      strcat(line, "\n");
    ssize_t w = write(fd, line, strlen(line));
    (void)w;
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
    return;
  }
  if (buf[0] == 'G') {
    // The request fits one segment in this lab; answer it and close.
    ssize_t w = write(fd, kResponse, sizeof kResponse - 1);
    (void)w;
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
  }
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s IP PORT MAX_SECONDS\n", argv[0]);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  alarm((unsigned)atoi(argv[3]));  // bounded lifetime even if the harness dies
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
  if (inet_pton(AF_INET, argv[1], &a.sin_addr) != 1 || bind(ls, (struct sockaddr*)&a, sizeof a) != 0 ||
      listen(ls, 65535) != 0) {
    perror("bench_server: listen");
    return 1;
  }
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls};
  epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
  printf("listening\n");
  fflush(stdout);
  struct epoll_event evs[256];
  for (;;) {
    int n = epoll_wait(ep, evs, 256, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return 1;
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd != ls) {
        on_client(ep, fd);
        continue;
      }
      for (int k = 0; k < 256; k++) {
        int c = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) break;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct epoll_event cev = {.events = EPOLLIN, .data.fd = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
      }
    }
  }
}
