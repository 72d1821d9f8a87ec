// SPDX-License-Identifier: MIT
import java.net.URI;
import java.sql.Array;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;

/**
 * A review service that writes its events with outbox.enqueue() (JDBC).
 *
 * <p>Each review and its events commit in one transaction: both, or neither. It writes one event
 * with outbox.enqueue(), two with outbox.enqueue_many(), has one refused (SQLSTATE 22023: the
 * review rolls back with it), and resolves a COMMIT whose answer was lost (docs/writing-events.md).
 *
 * <pre>
 *   javac -cp /usr/share/java/postgresql.jar ReviewWriter.java
 *   DATABASE_URL=postgresql://app@127.0.0.1:5432/app \
 *     java -cp .:/usr/share/java/postgresql.jar ReviewWriter
 * </pre>
 *
 * <p>Prints one JSON line per step. Works directly and through PgBouncer in transaction mode
 * (docs/writing-events.md).
 */
public final class ReviewWriter {
    static final String MOVIE_ID = "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b";
    static final long RESOLVE_TIMEOUT_MS = 60_000;
    /**
     * Six single reviews: the driver prepares a statement on the server from its fifth run on
     * unless told not to, and that is where a transaction pooler breaks it.
     */
    static final int SINGLE_REVIEWS = 6;

    /** What one transaction wrote, and how lost COMMIT answers were resolved. */
    static final class Written {
        String reviewId;
        List<String> eventIds = new ArrayList<>();
        List<String> inDoubt = new ArrayList<>();
    }

    interface Work {
        Written run(Connection conn) throws SQLException;
    }

    // docs:start connect
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
        // prepareThreshold=0: the driver never names a prepared statement on the
        // server, so any pooled server connection can run the next statement
        // (PgBouncer in transaction mode).
        props.setProperty("prepareThreshold", "0");
        Connection conn = DriverManager.getConnection(
                "jdbc:postgresql://" + uri.getHost() + ":" + uri.getPort() + uri.getPath(), props);
        conn.setAutoCommit(false);
        return conn;
    }
    // docs:end connect

    static String insertReview(Connection conn, int stars) throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement(
                "INSERT INTO reviews (movie_id, stars) VALUES (?::uuid, ?) RETURNING id::text")) {
            ps.setString(1, MOVIE_ID);
            ps.setInt(2, stars);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                return rs.getString(1);
            }
        }
    }

    // docs:start single
    /** The review and its event, in the caller's open transaction. */
    static Written addReview(Connection conn, int stars) throws SQLException {
        Written w = new Written();
        w.reviewId = insertReview(conn, stars);
        try (PreparedStatement ps = conn.prepareStatement(
                "SELECT outbox.enqueue('movie', ?::uuid, 'review.logged', ?::jsonb)::text")) {
            ps.setString(1, MOVIE_ID);
            ps.setString(2, "{\"review_id\": \"" + w.reviewId + "\", \"stars\": " + stars + "}");
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                w.eventIds.add(rs.getString(1));
            }
        }
        return w;
    }
    // docs:end single

    // docs:start many
    /** A review and two events, written by one outbox.enqueue_many() call. */
    static Written addReviewAndRating(Connection conn, int stars) throws SQLException {
        Written w = new Written();
        w.reviewId = insertReview(conn, stars);
        String events = "[{\"aggregate_type\": \"movie\", \"aggregate_id\": \"" + MOVIE_ID + "\", "
                + "\"event_type\": \"review.logged\", "
                + "\"payload\": {\"review_id\": \"" + w.reviewId + "\", \"stars\": " + stars + "}}, "
                + "{\"aggregate_type\": \"movie\", \"aggregate_id\": \"" + MOVIE_ID + "\", "
                + "\"event_type\": \"rating.changed\", \"payload\": {\"stars\": " + stars + "}, "
                + "\"tenant_id\": \"acme\"}]";
        try (PreparedStatement ps =
                conn.prepareStatement("SELECT outbox.enqueue_many(?::jsonb)::text[]")) {
            ps.setString(1, events);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                Array ids = rs.getArray(1);
                w.eventIds.addAll(Arrays.asList((String[]) ids.getArray()));
            }
        }
        return w;
    }
    // docs:end many

    /** An event_type that repeats its aggregate_type: outbox.enqueue() refuses it. */
    static Written addRefusedReview(Connection conn, int stars) throws SQLException {
        Written w = new Written();
        w.reviewId = insertReview(conn, stars);
        System.out.println("{\"step\": \"refused\", \"review_id\": " + json(w.reviewId) + "}");
        try (PreparedStatement ps = conn.prepareStatement(
                "SELECT outbox.enqueue('movie', ?::uuid, 'movie.review.logged', '{}')")) {
            ps.setString(1, MOVIE_ID);
            ps.executeQuery().close();
        }
        return w;
    }

    // docs:start commit
    /** committed or aborted: the fate of transaction xid, asked over a new connection. */
    static String resolve(String url, String xid) throws SQLException, InterruptedException {
        long deadline = System.currentTimeMillis() + RESOLVE_TIMEOUT_MS;
        try (Connection conn = connect(url);
                PreparedStatement ps = conn.prepareStatement("SELECT pg_xact_status(?::xid8)")) {
            conn.setAutoCommit(true);
            ps.setString(1, xid);
            for (;;) {
                String status;
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    status = rs.getString(1);
                }
                if ("committed".equals(status) || "aborted".equals(status)) {
                    return status;
                }
                if (status == null || System.currentTimeMillis() > deadline) {
                    throw new SQLException("transaction " + xid + " unresolved: " + status);
                }
                Thread.sleep(100); // in progress until its server process sees us gone
            }
        }
    }

    /** The connection to go on with, after writing once. */
    static Connection conn;

    /** Runs work in a transaction and commits it exactly once. */
    static Written write(String url, Work work) throws SQLException, InterruptedException {
        List<String> inDoubt = new ArrayList<>();
        for (;;) {
            Written w;
            String xid;
            try (Statement st = conn.createStatement()) {
                w = work.run(conn);
                try (ResultSet rs = st.executeQuery("SELECT pg_current_xact_id()::text")) {
                    rs.next();
                    xid = rs.getString(1);
                }
            } catch (SQLException e) {
                conn.rollback();
                throw e;
            }
            w.inDoubt = inDoubt;
            try {
                conn.commit();
                return w;
            } catch (SQLException e) {
                // An answer from the server (not class 08, connection): it refused, nothing written.
                if (e.getSQLState() != null && !e.getSQLState().startsWith("08")) {
                    throw e;
                }
            }
            // The COMMIT may or may not have happened: never write it again blindly.
            conn.close();
            String fate = resolve(url, xid);
            inDoubt.add(fate);
            conn = connect(url);
            if (fate.equals("committed")) {
                return w;
            }
            // aborted: nothing of it was written, so writing it again is safe
        }
    }
    // docs:end commit

    static String json(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    static String json(List<String> list) {
        List<String> quoted = new ArrayList<>();
        for (String s : list) {
            quoted.add(json(s));
        }
        return "[" + String.join(", ", quoted) + "]";
    }

    static void printStep(String step, Written w) {
        System.out.println("{\"step\": " + json(step) + ", \"review_id\": " + json(w.reviewId)
                + ", \"event_ids\": " + json(w.eventIds) + ", \"in_doubt\": " + json(w.inDoubt)
                + "}");
    }

    public static void main(String[] args) throws Exception {
        String url = System.getenv("DATABASE_URL");
        if (url == null || url.isEmpty()) {
            System.err.println("ReviewWriter: set DATABASE_URL");
            System.exit(2);
        }
        conn = connect(url);
        conn.setAutoCommit(true);
        try (Statement st = conn.createStatement()) {
            st.execute("CREATE TABLE IF NOT EXISTS reviews (id uuid PRIMARY KEY DEFAULT "
                    + "gen_random_uuid(), movie_id uuid NOT NULL, stars integer NOT NULL)");
        }
        conn.setAutoCommit(false);
        for (int i = 0; i < SINGLE_REVIEWS; i++) {
            printStep("single", write(url, c -> addReview(c, 5)));
        }
        printStep("many", write(url, c -> addReviewAndRating(c, 4)));
        // docs:start refused
        try {
            write(url, c -> addRefusedReview(c, 1));
        } catch (SQLException e) {
            if (!"22023".equals(e.getSQLState())) {
                throw e;
            }
            // Rolled back: the review is gone with the event it could not write.
            System.out.println("{\"step\": \"refused\", \"sqlstate\": " + json(e.getSQLState())
                    + ", \"message\": " + json(e.getMessage()) + "}");
            conn.close();
            return;
        }
        // docs:end refused
        System.err.println("ReviewWriter: the refused event was accepted");
        System.exit(1);
    }
}
