package httpapi

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookline/bookline/httpapi/webhook/endpoint"
)

// WebhookSampler is what the metrics read from the webhook deliveries at
// every scrape (webhook.Manager implements it).
type WebhookSampler interface {
	Stats(ctx context.Context) []endpoint.Stat
}

// AttachWebhooks registers the per-endpoint webhook metrics, sampled at
// scrape time: deliveries and failed attempts made by this instance, and
// the endpoint's lag from its consumer (the same on every instance).
func (m *Metrics) AttachWebhooks(w WebhookSampler) {
	m.reg.MustRegister(&webhookCollector{w: w})
}

type webhookCollector struct{ w WebhookSampler }

var (
	descWebhookDelivered = prometheus.NewDesc("bookline_webhook_deliveries_total",
		"Events delivered to a webhook endpoint (answered 2xx) by this instance, by endpoint id.", []string{"endpoint"}, nil)
	descWebhookFailed = prometheus.NewDesc("bookline_webhook_delivery_failures_total",
		"Failed delivery attempts to a webhook endpoint by this instance, by endpoint id and reason (http_5xx, http_4xx, http_3xx, http_other, timeout, network, address_refused).",
		[]string{"endpoint", "reason"}, nil)
	descWebhookLag = prometheus.NewDesc("bookline_webhook_lag_events",
		"Outcome events not yet delivered to a webhook endpoint (its consumer's pending and unacknowledged events), by endpoint id.", []string{"endpoint"}, nil)
	descWebhookEnabled = prometheus.NewDesc("bookline_webhook_enabled",
		"1 while a webhook endpoint is enabled; 0 once an admin or its failures disabled it.", []string{"endpoint"}, nil)
)

func (c *webhookCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWebhookDelivered, descWebhookFailed, descWebhookLag, descWebhookEnabled} {
		ch <- d
	}
}

func (c *webhookCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, st := range c.w.Stats(ctx) {
		ch <- prometheus.MustNewConstMetric(descWebhookDelivered, prometheus.CounterValue, float64(st.Delivered), st.ID)
		for reason, n := range st.Failed {
			ch <- prometheus.MustNewConstMetric(descWebhookFailed, prometheus.CounterValue, float64(n), st.ID, reason)
		}
		if st.Lag >= 0 {
			ch <- prometheus.MustNewConstMetric(descWebhookLag, prometheus.GaugeValue, float64(st.Lag), st.ID)
		}
		ch <- prometheus.MustNewConstMetric(descWebhookEnabled, prometheus.GaugeValue, b2f(st.Enabled), st.ID)
	}
}
