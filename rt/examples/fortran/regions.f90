! regions.f90 - marks nested regions from Fortran.
!   gfortran -I DIR_WITH_powerperf.mod rt/fortran/powerperf.f90 regions.f90 -L LIBDIR -lpowerperf_rt
!   POWERPERF_RUN_DIR=/tmp/run ./regions
! Records: main (1) > iterate (4) > residual (4, by handle).
program regions
  use powerperf
  implicit none
  integer :: i, j, rc
  integer(pp_handle_kind) :: h
  real(8) :: s

  rc = 0
  h = pp_region_handle("residual")
  rc = ior(rc, pp_region_begin("main"))
  s = 0
  do i = 1, 4
    rc = ior(rc, pp_region_begin("iterate   "))   ! trailing blanks are trimmed
    rc = ior(rc, pp_region_begin_h(h))
    s = s + sum([(sqrt(real(i * 1000 + j, 8)), j = 1, 100000)])
    rc = ior(rc, pp_region_end_h(h))
    rc = ior(rc, pp_region_end("iterate"))
  end do
  rc = ior(rc, pp_region_end("main"))
  call pp_flush()
  print '(a,i0,a,i0)', 'recording=', pp_enabled(), ' rc=', rc
  if (s < 0) print *, s
  if (rc /= 0) stop 1
end program regions
