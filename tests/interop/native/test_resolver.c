/*
 * A getaddrinfo() for test clients, loaded with LD_PRELOAD: every name under
 * $KSHIM_TEST_DOMAIN (the domain itself too, in any case) resolves to 127.0.0.1,
 * and every other name as the system resolves it. The client still connects by
 * the name, so that it sends it as its TLS server name and checks the broker's
 * certificate against it, as it would with a wildcard DNS record, and nothing on
 * the machine (/etc/hosts, nsswitch) changes.
 *
 * Built by tests/interop/test_sni.py: cc -shared -fPIC -o libtest_resolver.so test_resolver.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef int (*getaddrinfo_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

static int under(const char *name, const char *domain) {
    size_t n = strlen(name), d = strlen(domain);
    if (d == 0) {
        return 0;
    }
    if (n == d) {
        return strcasecmp(name, domain) == 0;
    }
    return n > d + 1 && name[n - d - 1] == '.' && strcasecmp(name + n - d, domain) == 0;
}

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res) {
    static getaddrinfo_fn real;
    if (real == NULL) {
        real = (getaddrinfo_fn)dlsym(RTLD_NEXT, "getaddrinfo");
        if (real == NULL) {
            return EAI_SYSTEM;
        }
    }
    const char *domain = getenv("KSHIM_TEST_DOMAIN");
    if (node != NULL && domain != NULL && under(node, domain)) {
        node = "127.0.0.1";
    }
    return real(node, service, hints, res);
}
