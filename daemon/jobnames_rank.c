/* jobnames_rank.c: the rendezvous hash that gives each job name its owner
 * (jobnames.c); on its own so that the unit tests link it alone. */
#include "daemon.h"

uint64_t px_jobnames_rank(const char *name, const char *member)
{
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a 64 offset basis */
    const unsigned char *p;

    for (p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 0x100000001b3ULL; /* FNV-1a 64 prime */
    h *= 0x100000001b3ULL;               /* the 0 byte between the two */
    for (p = (const unsigned char *)member; *p; p++)
        h = (h ^ *p) * 0x100000001b3ULL;
    h ^= h >> 30; /* splitmix64's finaliser */
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return h;
}
