# Each service's RSS over its run, plain (dashed) against zsm-run (solid), from
# tools/run-region-services.sh's series (columns: seconds, MiB).
# Variables (gnuplot -e): dir, services (names, space-separated), out, term, title.
set terminal @term size 1200,600 noenhanced
set output out
set title title
set grid
set key bottom right
set datafile separator ","
set xlabel "seconds since the service started (load, warm-up, then the measured phase)"
set ylabel "RSS (MiB)"
set yrange [0:*]
plot for [i=1:words(services)] sprintf("%s/%s-plain.rss.csv", dir, word(services, i)) every ::1 \
       using 1:2 with lines dt 2 lw 2 lc i title word(services, i)." plain", \
     for [i=1:words(services)] sprintf("%s/%s-zsm.rss.csv", dir, word(services, i)) every ::1 \
       using 1:2 with lines lw 2 lc i title word(services, i)." under zsm-run"
