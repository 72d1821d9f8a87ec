// SPDX-License-Identifier: MIT
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.Properties;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.Executors;
import org.postgresql.util.PSQLException;
import org.postgresql.util.ServerErrorMessage;

/**
 * An HTTP endpoint behind outboxd's http: handler that runs its effect once per event (the JDK's
 * com.sun.net.httpserver and JDBC).
 *
 * <p>outboxd consume POSTs each event as a CloudEvent in binary mode (docs/consumers.md, "The
 * http: handler"): the event id in ce-id (and Idempotency-Key), the event's envelope as the JSON
 * body. The endpoint writes its effect, one row in review_feed, in one transaction with
 * outbox.try_claim(event id, its own handler name, envelope) (docs/consumers.md, "From any
 * language: the ledger in SQL"):
 *
 * <ul>
 *   <li>true: the claim commits with the effect; 204.
 *   <li>false: done already (a retry after a lost answer, a replica's run); 204, no effect.
 *   <li>55P03 / 55000 (not now: another claim holds it, or it backs off): rolled back; 503 with
 *       Retry-After from the error's retry_after_ms, which the daemon honours without spending an
 *       attempt.
 * </ul>
 *
 * <p>An effect that fails (here: a payload {"poison": true}) rolls back with its claim and answers
 * 500: the daemon spends an attempt each time and dead-letters the event, under its own handler
 * name, at OUTBOX_MAX_ATTEMPTS. A database that cannot be reached answers 503 (retried, no attempt
 * spent). The JDK has no JSON parser: the envelope is read in SQL, as jsonb.
 *
 * <pre>
 *   CREATE TABLE review_feed (event_id uuid NOT NULL, endpoint text NOT NULL,
 *       aggregate_id uuid NOT NULL, event_type text NOT NULL, payload jsonb NOT NULL,
 *       at timestamptz NOT NULL DEFAULT now());
 *   javac -cp /usr/share/java/postgresql.jar ReviewEndpoint.java
 *   DATABASE_URL=postgresql://app@127.0.0.1:5432/app PORT=8082 \
 *     java -cp .:/usr/share/java/postgresql.jar ReviewEndpoint
 *   OUTBOX_CONSUMER_NAME=reviews outboxd consume 'reviews=http:http://127.0.0.1:8082/events'
 * </pre>
 *
 * <p>PORT 0 (the default) takes a free port; the endpoint prints one JSON line, {"listening":
 * PORT}, once it accepts requests. ENDPOINT_HANDLER is the name of its claims in the ledger
 * (default java-reviews: not the daemon's handler name, whose rows record the deliveries);
 * ENDPOINT_NAME goes into each effect row. Binary mode only (the daemon's default).
 */
public final class ReviewEndpoint {
    /** The http: handler sends up to 8 requests at once by default. */
    static final int POOL_SIZE = 8;

    /** An event this service can never handle. */
    static final class PoisonedException extends Exception {
        private static final long serialVersionUID = 1L;

        PoisonedException(String message) {
            super(message);
        }
    }

    static Connection connect(String url) throws SQLException {
        URI uri = URI.create(url); // postgresql://user[:password]@host:port/database
        Properties props = new Properties();
        String[] user = uri.getUserInfo() == null ? new String[0] : uri.getUserInfo().split(":", 2);
        if (user.length > 0) {
            props.setProperty("user", user[0]);
        }
        if (user.length > 1) {
            props.setProperty("password", user[1]);
        }
        // prepareThreshold=0: works through PgBouncer in transaction mode too.
        props.setProperty("prepareThreshold", "0");
        Connection conn = DriverManager.getConnection(
                "jdbc:postgresql://" + uri.getHost() + ":" + uri.getPort() + uri.getPath(), props);
        conn.setAutoCommit(false);
        return conn;
    }

    /** A few open connections shared by the request threads (one per thread of the server). */
    static final class Pool {
        final String url;
        final BlockingQueue<Connection> idle = new ArrayBlockingQueue<>(POOL_SIZE);

        Pool(String url) {
            this.url = url;
        }

        Connection get() throws SQLException {
            Connection conn = idle.poll();
            return conn != null ? conn : connect(url);
        }

        void put(Connection conn) {
            try {
                if (conn.isClosed() || !idle.offer(conn)) {
                    conn.close();
                }
            } catch (SQLException e) {
                // a broken connection: dropped
            }
        }
    }

    // docs:start effect
    /** True if this request ran the effect, false if it was done already. */
    static boolean handle(Connection conn, String handler, String endpoint, String eventId,
            String envelope) throws SQLException, PoisonedException {
        try {
            try (PreparedStatement ps = conn.prepareStatement(
                         "SELECT outbox.try_claim(?::uuid, ?, ?::jsonb)")) {
                ps.setString(1, eventId);
                ps.setString(2, handler);
                ps.setString(3, envelope);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    if (!rs.getBoolean(1)) {
                        conn.rollback(); // nothing written: done already
                        return false;
                    }
                }
            }
            try (PreparedStatement ps = conn.prepareStatement(
                         "SELECT coalesce(?::jsonb #> '{payload,poison}' = 'true', false)")) {
                ps.setString(1, envelope);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    if (rs.getBoolean(1)) {
                        throw new PoisonedException("event " + eventId + " is poisoned");
                    }
                }
            }
            try (PreparedStatement ps = conn.prepareStatement(
                         "INSERT INTO review_feed (event_id, endpoint, aggregate_id, event_type, "
                         + "payload) SELECT ?::uuid, ?, (e->>'aggregate_id')::uuid, "
                         + "e->>'event_type', e->'payload' FROM (SELECT ?::jsonb AS e) AS m")) {
                ps.setString(1, eventId);
                ps.setString(2, endpoint);
                ps.setString(3, envelope);
                ps.executeUpdate();
            }
            conn.commit(); // the claim and the effect: both, or neither
            return true;
        } catch (SQLException | PoisonedException | RuntimeException e) {
            try {
                conn.rollback(); // the claim goes with the effect
            } catch (SQLException ignored) {
                // the connection broke: the server rolls back
            }
            throw e;
        }
    }
    // docs:end effect

    /** Seconds from the error's DETAIL "retry_after_ms=N", at least 1. */
    static long retryAfterSeconds(SQLException e) {
        ServerErrorMessage m = e instanceof PSQLException ? ((PSQLException) e).getServerErrorMessage()
                                                          : null;
        String detail = m != null && m.getDetail() != null ? m.getDetail() : "";
        long ms = 1000;
        if (detail.startsWith("retry_after_ms=")) {
            ms = Long.parseLong(detail.substring("retry_after_ms=".length()).trim());
        }
        return Math.max(1, (ms + 999) / 1000);
    }

    static void answer(HttpExchange ex, int status, String text) throws IOException {
        byte[] body = text.getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("Content-Type", "text/plain; charset=utf-8");
        ex.sendResponseHeaders(status, body.length == 0 ? -1 : body.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(body);
        }
    }

    static void serve(HttpExchange ex, Pool pool, String handler, String endpoint)
            throws IOException {
        String envelope;
        try (InputStream in = ex.getRequestBody()) {
            envelope = new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
        String eventId = ex.getRequestHeaders().getFirst("ce-id"); // case-insensitive
        if (!"POST".equals(ex.getRequestMethod()) || eventId == null || eventId.isEmpty()) {
            answer(ex, 400, "want a binary-mode CloudEvent: POST, ce-id and a JSON envelope");
            return;
        }
        Connection conn;
        try {
            conn = pool.get();
        } catch (SQLException e) {
            ex.getResponseHeaders().set("Retry-After", "1");
            answer(ex, 503, "database unreachable: " + e.getMessage());
            return;
        }
        try {
            boolean ran = handle(conn, handler, endpoint, eventId, envelope);
            ex.getResponseHeaders().set("X-Effect", ran ? "applied" : "done-already");
            answer(ex, 204, "");
        } catch (PoisonedException e) {
            answer(ex, 500, e.getMessage()); // an attempt spent; dead-lettered at the last
        } catch (SQLException e) {
            String state = e.getSQLState() == null ? "" : e.getSQLState();
            if (state.equals("55P03") || state.equals("55000")) { // not now
                ex.getResponseHeaders().set("Retry-After", Long.toString(retryAfterSeconds(e)));
                answer(ex, 503, e.getMessage());
            } else if (state.startsWith("08") || state.startsWith("57P")) { // connection lost
                ex.getResponseHeaders().set("Retry-After", "1");
                answer(ex, 503, "database: " + e.getMessage());
            } else { // 22023 (an envelope that is not this event's, or not JSON) and the rest
                answer(ex, 500, state + ": " + e.getMessage());
            }
        } finally {
            pool.put(conn);
        }
    }

    public static void main(String[] args) throws IOException {
        String url = System.getenv("DATABASE_URL");
        if (url == null || url.isEmpty()) {
            System.err.println("ReviewEndpoint: set DATABASE_URL");
            System.exit(2);
        }
        String port = System.getenv().getOrDefault("PORT", "0");
        String handler = System.getenv().getOrDefault("ENDPOINT_HANDLER", "java-reviews");
        String endpoint = System.getenv().getOrDefault("ENDPOINT_NAME", "java");
        Pool pool = new Pool(url);
        // The handler's order starts here (a new schema is ordered): events already out
        // run once each, unordered; the ones after, in order. Taken once per handler
        // name, before the first request; later calls keep it.
        try {
            Connection conn = pool.get();
            try (PreparedStatement ps =
                            conn.prepareStatement("SELECT outbox.ledger_order_baseline(?)")) {
                ps.setString(1, handler);
                ps.execute();
            }
            conn.commit();
            pool.put(conn);
        } catch (SQLException e) {
            System.err.println("ReviewEndpoint: taking the handler's order baseline: " + e);
            System.exit(1);
        }
        HttpServer server =
                HttpServer.create(new InetSocketAddress("127.0.0.1", Integer.parseInt(port)), 64);
        server.createContext("/", ex -> {
            try {
                serve(ex, pool, handler, endpoint);
            } finally {
                ex.close();
            }
        });
        server.setExecutor(Executors.newFixedThreadPool(POOL_SIZE));
        server.start();
        System.out.println("{\"listening\": " + server.getAddress().getPort() + "}");
        System.out.flush();
    }
}
