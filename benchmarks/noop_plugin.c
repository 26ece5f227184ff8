/*
 * noop_plugin: the cheapest possible CNI plugin, for benchmarks/run.py.
 *
 * It reads all of its standard input, then by CNI_COMMAND:
 *   ADD      prints the "prevResult" object of its input if there is one,
 *            else a fixed small 1.0.0 result;
 *   VERSION  prints a supportedVersions reply;
 *   anything else (DEL, CHECK, GC, STATUS) prints nothing.
 * and exits 0. It allocates once, parses nothing but the prevResult object
 * (a brace matcher that skips JSON strings), and never touches the network.
 *
 * Built by run.py with the system C compiler:
 *   cc -O2 -o benchmarks/build/noop benchmarks/noop_plugin.c
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char RESULT[] =
    "{\"cniVersion\":\"1.0.0\",\"ips\":[{\"address\":\"10.0.0.2/24\"}]}";
static const char VERSIONS[] =
    "{\"cniVersion\":\"1.1.0\",\"supportedVersions\":"
    "[\"0.1.0\",\"0.2.0\",\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\",\"1.1.0\"]}";

static int write_all(const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(1, p, n);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The end (one past the closing brace) of the JSON object starting at p. */
static const char *object_end(const char *p, const char *end) {
    int depth = 0;
    for (; p < end; p++) {
        if (*p == '"') {
            for (p++; p < end && *p != '"'; p++)
                if (*p == '\\')
                    p++;
        } else if (*p == '{' || *p == '[') {
            depth++;
        } else if (*p == '}' || *p == ']') {
            if (--depth == 0)
                return p + 1;
        }
    }
    return NULL;
}

int main(void) {
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    if (buf == NULL)
        return 1;
    for (;;) {
        if (len == cap) {
            cap *= 2;
            char *bigger = realloc(buf, cap + 1);
            if (bigger == NULL)
                return 1;
            buf = bigger;
        }
        ssize_t n = read(0, buf + len, cap - len);
        if (n < 0)
            return 1;
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';

    const char *cmd = getenv("CNI_COMMAND");
    if (cmd == NULL)
        cmd = "";
    if (strcmp(cmd, "VERSION") == 0)
        return write_all(VERSIONS, sizeof VERSIONS - 1) ? 1 : 0;
    if (strcmp(cmd, "ADD") != 0)
        return 0;

    const char *key = strstr(buf, "\"prevResult\":");
    if (key != NULL) {
        const char *start = key + strlen("\"prevResult\":");
        while (*start == ' ' || *start == '\n' || *start == '\t' || *start == '\r')
            start++;
        const char *stop = *start == '{' ? object_end(start, buf + len) : NULL;
        if (stop != NULL)
            return write_all(start, (size_t)(stop - start)) ? 1 : 0;
    }
    return write_all(RESULT, sizeof RESULT - 1) ? 1 : 0;
}
