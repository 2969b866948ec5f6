#include "core/base/metrics.h"

#include <stdio.h>


const double tg_metrics_lat_bounds[12] = {1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 5000, 1e300};

void tg_metrics_observe_latency(struct tg_metrics *m, double ms)
{
    for (int i = 0; i < 12; i++)
        if (ms <= tg_metrics_lat_bounds[i]) {
            m->lat_buckets[i]++;
            break;
        }
    m->lat_count++;
    m->lat_sum += ms / 1000.0;
}

