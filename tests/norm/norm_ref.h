/* norm_ref.h - the layer-norm kernels as they were before their rows'
 * moments were computed four rows at a time (runtime/mp_kernels_nn.h,
 * mp_moments4 / mp_ln_stats): one row at a time, each row's sums in the
 * order the new code must keep. The reference of tests/t_norm_bits.sh;
 * included after the runtime (it uses mp_moments, mp_norm_dx_row,
 * MP_ROWS_LOOP, mp_ld_n / mp_st_n). */

static inline void ref_layer_norm(void *y, int ydt, const void *x, int xdt, const void *w,
                                   int wdt, const void *b, int bdt, int64_t rows,
                                   int64_t dim, float eps)
{
    MP_ROWS_LOOP(rows, dim, 1, 3,
        float mean, rstd, *wv = buf + dim, *bv = buf + 2 * dim;
        mp_ld_n(x, xdt, off, 1, dim, buf);
        mp_moments(buf, dim, eps, &mean, &rstd);
        if (w) mp_ld_n(w, wdt, 0, 1, dim, wv);
        if (b) mp_ld_n(b, bdt, 0, 1, dim, bv);
        for (int64_t j = 0; j < dim; j++)
            buf[j] = (buf[j] - mean) * rstd * (w ? wv[j] : 1.0f) + (b ? bv[j] : 0.0f);
        mp_st_n(y, ydt, off, 1, dim, buf))
}

static inline void ref_layer_norm_dx(void *dx, int dxdt, const void *dy, int dydt,
                                      const void *x, int xdt, const void *w, int wdt,
                                      int64_t rows, int64_t dim, float eps)
{
    MP_ROWS_LOOP(rows, dim, 1, 3,
        float mean, rstd, *g = buf + dim, *wv = buf + 2 * dim;
        mp_ld_n(x, xdt, off, 1, dim, buf);
        mp_moments(buf, dim, eps, &mean, &rstd);
        for (int64_t j = 0; j < dim; j++) buf[j] = (buf[j] - mean) * rstd;
        mp_ld_n(dy, dydt, off, 1, dim, g);
        if (w) {
            mp_ld_n(w, wdt, 0, 1, dim, wv);
            for (int64_t j = 0; j < dim; j++) g[j] *= wv[j];
        }
        mp_norm_dx_row(g, buf, dim, rstd);
        mp_st_n(dx, dxdt, off, 1, dim, g))
}

static inline void ref_layer_norm_dw(void *dw, int dwdt, const void *dy, int dydt,
                                      const void *x, int xdt, int64_t rows, int64_t dim,
                                      float eps, float beta)
{
    double *acc = (double *)mp_kzalloc((size_t)dim * sizeof *acc);
    float *v = (float *)mp_kalloc((size_t)(2 * dim) * sizeof *v), *g = v + dim;
    for (int64_t r = 0; r < rows; r++) {
        float mean, rstd;
        mp_ld_n(x, xdt, r * dim, 1, dim, v);
        mp_moments(v, dim, eps, &mean, &rstd);
        mp_ld_n(dy, dydt, r * dim, 1, dim, g);
        for (int64_t j = 0; j < dim; j++) acc[j] += g[j] * ((v[j] - mean) * rstd);
    }
    for (int64_t j = 0; j < dim; j++) v[j] = (float)acc[j];
    mp_st_beta(dw, dwdt, 0, dim, v, beta);
    free(acc);
    free(v);
}
