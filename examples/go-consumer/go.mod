module pgoutbox.example/consumer

go 1.19

require (
	github.com/jackc/pgconn v1.11.0
	github.com/jackc/pgx/v4 v4.15.0
	github.com/nats-io/nats.go v1.22.1
)
