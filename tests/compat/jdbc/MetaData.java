// pgjdbc's DatabaseMetaData against Quiver's Postgres door, as DBeaver, DataGrip and
// Metabase call it when they browse a database, then an aggregation. Run by
// tests/compat/test_jdbc.py (which compiles it against Debian's libpostgresql-jdbc-java
// and checks what it prints): one tab-separated line per row, the kind first.
//
// Usage: java -cp postgresql.jar:. MetaData <jdbc-url> <user> <password> <table>

import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.Statement;

public class MetaData {
    public static void main(String[] args) throws Exception {
        String url = args[0];
        String user = args[1];
        String password = args[2];
        String table = args[3];
        try (Connection conn = DriverManager.getConnection(url, user, password)) {
            DatabaseMetaData meta = conn.getMetaData();
            print("product", meta.getDatabaseProductName(), meta.getDatabaseProductVersion());
            try (ResultSet rs = meta.getCatalogs()) {
                while (rs.next()) {
                    print("catalog", rs.getString("TABLE_CAT"));
                }
            }
            try (ResultSet rs = meta.getSchemas()) {
                while (rs.next()) {
                    print("schema", rs.getString("TABLE_SCHEM"));
                }
            }
            try (ResultSet rs = meta.getTables(null, null, "%", new String[] {"TABLE"})) {
                while (rs.next()) {
                    print("table", rs.getString("TABLE_SCHEM"), rs.getString("TABLE_NAME"),
                          rs.getString("TABLE_TYPE"));
                }
            }
            try (ResultSet rs = meta.getColumns(null, null, table, "%")) {
                while (rs.next()) {
                    print("column", rs.getString("TABLE_NAME"), rs.getString("COLUMN_NAME"),
                          rs.getString("TYPE_NAME"), String.valueOf(rs.getInt("DATA_TYPE")),
                          String.valueOf(rs.getInt("ORDINAL_POSITION")));
                }
            }
            // No keys or indexes in Quiver: empty results, not errors (DBeaver's
            // table view asks for both).
            int keys = 0;
            try (ResultSet rs = meta.getPrimaryKeys(null, null, table)) {
                while (rs.next()) {
                    keys++;
                }
            }
            int indexes = 0;
            try (ResultSet rs = meta.getIndexInfo(null, null, table, false, true)) {
                while (rs.next()) {
                    indexes++;
                }
            }
            print("keys", String.valueOf(keys), String.valueOf(indexes));
            try (ResultSet rs = meta.getTypeInfo()) {
                while (rs.next()) {
                    print("type", rs.getString("TYPE_NAME"), String.valueOf(rs.getInt("DATA_TYPE")));
                }
            }
            // The first row's time, read as JDBC tools read it: getTimestamp (the
            // instant, whatever the JVM's zone) and getObject as OffsetDateTime (what
            // pgjdbc allows for timestamptz only).
            String first = "SELECT time FROM " + table + " ORDER BY time LIMIT 1";
            try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(first)) {
                while (rs.next()) {
                    print("time", rs.getTimestamp(1).toInstant().toString(),
                          rs.getObject(1, java.time.OffsetDateTime.class).toInstant().toString());
                }
            }
            String sql = "SELECT host, count(*), avg(usage) FROM " + table
                + " GROUP BY host ORDER BY host";
            try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(sql)) {
                ResultSetMetaData columns = rs.getMetaData();
                String[] names = new String[columns.getColumnCount()];
                for (int i = 0; i < names.length; i++) {
                    names[i] = columns.getColumnLabel(i + 1);
                }
                print("result_columns", names);
                while (rs.next()) {
                    print("row", rs.getString(1), String.valueOf(rs.getLong(2)),
                          String.valueOf(rs.getDouble(3)));
                }
            }
        }
    }

    private static void print(String kind, String... values) {
        StringBuilder line = new StringBuilder(kind);
        for (String v : values) {
            line.append('\t').append(v);
        }
        System.out.println(line);
    }
}
